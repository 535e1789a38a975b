//! The HTTP server: routes, bounds, sessions kept and forgotten.
//!
//! | route | what |
//! |---|---|
//! | `GET /v1/models` | the one model served |
//! | `POST /v1/chat/completions` | a completion, not recorded |
//! | `POST /sessions/{ID}/v1/chat/completions` | a completion recorded under `ID` |
//! | `POST /sessions/{ID}/reward` | `{"reward": x, "metrics": {...}}` ends the episode |
//! | `GET /sessions/{ID}/trajectories` | its trajectories, JSON lines |
//! | `DELETE /sessions/{ID}` | forgets it |

use crate::model::ChatModel;
use crate::session::{Session, SessionOptions, SessionRecord};
use crate::state::{Inner, ServeConfig, lock};
use crate::{ApiError, chat};
use agentfly_core::rollout::Policy;
use axum::Router;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Semaphore;

/// A running endpoint.
pub struct Server {
    inner: Arc<Inner>,
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Server {
    /// Serves `policy` as `model` at `addr` (port 0 picks a free one).
    pub async fn start(
        model: ChatModel,
        policy: Arc<dyn Policy>,
        config: ServeConfig,
        addr: SocketAddr,
    ) -> std::io::Result<Self> {
        let started = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let inner = Arc::new(Inner {
            slots: Semaphore::new(config.max_concurrent.max(1)),
            model,
            policy,
            config,
            sessions: Mutex::new(HashMap::new()),
            ids: AtomicU64::new(0),
            started,
        });
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let router = router(inner.clone());
        let reaper = tokio::spawn(reap(Arc::downgrade(&inner)));
        let task = tokio::spawn(async move {
            let served = axum::serve(listener, router)
                .with_graceful_shutdown(async {
                    let _ = stopped.await;
                })
                .await;
            reaper.abort();
            served
        });
        Ok(Self {
            inner,
            addr,
            stop: Some(stop),
            task,
        })
    }

    /// The address served.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://ADDR/v1`: the base URL of unrecorded requests.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// `http://ADDR/sessions/{id}/v1`: the base URL that records under `id`.
    pub fn session_url(&self, id: &str) -> String {
        format!("http://{}/sessions/{id}/v1", self.addr)
    }

    /// Opens session `id` with `options` (its sampling fixed, say), replacing any of that
    /// name. Sessions are otherwise opened by their first request.
    pub fn open_session(&self, id: &str, options: SessionOptions) -> Result<(), ApiError> {
        check_id(id)?;
        let mut sessions = lock(&self.inner.sessions);
        if sessions.len() >= self.inner.config.max_sessions && !sessions.contains_key(id) {
            return Err(too_many(&self.inner.config));
        }
        sessions.insert(
            id.to_string(),
            Arc::new(tokio::sync::Mutex::new(Session::new(
                id.to_string(),
                options,
            ))),
        );
        Ok(())
    }

    /// Removes session `id` and returns what it recorded (waiting for a request of it in
    /// flight); `None` when there is none.
    pub async fn take_session(&self, id: &str) -> Option<SessionRecord> {
        let session = lock(&self.inner.sessions).remove(id)?;
        let session = session.lock().await;
        let taken = Session::new(session.id.clone(), SessionOptions::default());
        let mut session = session;
        let whole = std::mem::replace(&mut *session, taken);
        Some(whole.into_record(&self.inner.model))
    }

    /// Sessions kept now.
    pub fn sessions(&self) -> usize {
        lock(&self.inner.sessions).len()
    }

    /// Stops serving (requests in flight finish first).
    pub async fn shutdown(mut self) -> std::io::Result<()> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        (&mut self.task)
            .await
            .map_err(|e| std::io::Error::other(e.to_string()))?
    }

    /// Serves until the server fails.
    pub async fn wait(mut self) -> std::io::Result<()> {
        (&mut self.task)
            .await
            .map_err(|e| std::io::Error::other(e.to_string()))?
    }
}

fn too_many(config: &ServeConfig) -> ApiError {
    ApiError::TooMany(format!(
        "{} sessions are open, the most this server keeps: post their rewards and take \
         their trajectories, DELETE them, or wait {} s for idle ones to be forgotten",
        config.max_sessions,
        config.session_idle.as_secs()
    ))
}

pub(crate) fn check_id(id: &str) -> Result<(), ApiError> {
    let ok = !id.is_empty()
        && id.len() <= 128
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-:".contains(c));
    if ok {
        Ok(())
    } else {
        Err(ApiError::BadRequest {
            message: format!(
                "session id {id:?}: 1 to 128 characters of letters, digits, `.`, `_`, `-` and `:`"
            ),
            param: None,
            code: None,
        })
    }
}

/// Forgets sessions idle past the limit.
async fn reap(inner: std::sync::Weak<Inner>) {
    loop {
        let Some(every) = inner.upgrade().map(|i| {
            (i.config.session_idle / 4).clamp(Duration::from_millis(50), Duration::from_secs(10))
        }) else {
            return;
        };
        tokio::time::sleep(every).await;
        let Some(inner) = inner.upgrade() else { return };
        let idle = inner.config.session_idle;
        lock(&inner.sessions).retain(|_, s| match s.try_lock() {
            Ok(s) => s.last_used.elapsed() < idle,
            Err(_) => true, // a request of it is running
        });
    }
}

fn router(inner: Arc<Inner>) -> Router {
    Router::new()
        .route("/v1/models", get(models))
        .route("/sessions/{id}/v1/models", get(models))
        .route("/v1/chat/completions", post(plain_chat))
        .route("/sessions/{id}/v1/chat/completions", post(session_chat))
        .route("/sessions/{id}/reward", post(reward))
        .route("/sessions/{id}/trajectories", get(trajectories))
        .route("/sessions/{id}", axum::routing::delete(forget))
        .route("/health", get(|| async { "ok" }))
        .fallback(|| async {
            ApiError::NotFound(
                "no such route: see /v1/models, /v1/chat/completions, /sessions/{ID}/v1/...".into(),
            )
        })
        .with_state(inner)
}

pub(crate) fn authorize(inner: &Inner, headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(key) = &inner.config.api_key else {
        return Ok(());
    };
    let given = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    if given == Some(key.as_str()) {
        Ok(())
    } else {
        Err(ApiError::Unauthorized(
            "a wrong or missing API key: send `Authorization: Bearer <key>`".into(),
        ))
    }
}

async fn body_bytes(inner: &Inner, body: Body) -> Result<axum::body::Bytes, ApiError> {
    let limit = inner.config.max_request_bytes;
    axum::body::to_bytes(body, limit).await.map_err(|_| {
        ApiError::TooLarge(format!(
            "the request body is over this server's limit of {limit} bytes"
        ))
    })
}

async fn models(State(inner): State<Arc<Inner>>, headers: HeaderMap) -> Response {
    if let Err(e) = authorize(&inner, &headers) {
        return e.into_response();
    }
    let body = json!({"object": "list", "data": [{"id": inner.model.name, "object": "model", "created": inner.started, "owned_by": "agentfly"}]});
    respond("application/json", body.to_string())
}

async fn plain_chat(State(inner): State<Arc<Inner>>, headers: HeaderMap, body: Body) -> Response {
    let run = async {
        authorize(&inner, &headers)?;
        let body = body_bytes(&inner, body).await?;
        chat::complete(&inner, None, &body).await
    };
    run.await.unwrap_or_else(IntoResponse::into_response)
}

async fn session_chat(
    State(inner): State<Arc<Inner>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let run = async {
        authorize(&inner, &headers)?;
        check_id(&id)?;
        let body = body_bytes(&inner, body).await?;
        let session = {
            let mut sessions = lock(&inner.sessions);
            match sessions.get(&id) {
                Some(s) => s.clone(),
                None => {
                    if sessions.len() >= inner.config.max_sessions {
                        return Err(too_many(&inner.config));
                    }
                    let s = Arc::new(tokio::sync::Mutex::new(Session::new(
                        id.clone(),
                        SessionOptions::default(),
                    )));
                    sessions.insert(id.clone(), s.clone());
                    s
                }
            }
        };
        chat::complete(&inner, Some(session), &body).await
    };
    run.await.unwrap_or_else(IntoResponse::into_response)
}

fn session_of(inner: &Inner, id: &str) -> Result<Arc<tokio::sync::Mutex<Session>>, ApiError> {
    lock(&inner.sessions).get(id).cloned().ok_or_else(|| {
        ApiError::NotFound(format!(
            "no session {id:?} (never opened, or forgotten after {} s idle)",
            inner.config.session_idle.as_secs()
        ))
    })
}

async fn reward(
    State(inner): State<Arc<Inner>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let run = async {
        authorize(&inner, &headers)?;
        let body = body_bytes(&inner, body).await?;
        let value: Value = serde_json::from_slice(&body).map_err(|e| {
            ApiError::bad(
                "reward",
                format!("the body must be {{\"reward\": number, \"metrics\": {{...}}}}: {e}"),
            )
        })?;
        let reward = value["reward"]
            .as_f64()
            .map(|r| r as f32)
            .filter(|r| r.is_finite())
            .ok_or_else(|| ApiError::bad("reward", "`reward` must be a finite number"))?;
        let mut metrics = BTreeMap::new();
        if let Some(given) = value.get("metrics").filter(|m| !m.is_null()) {
            let Some(given) = given.as_object() else {
                return Err(ApiError::bad(
                    "metrics",
                    "`metrics` must be an object of numbers",
                ));
            };
            for (k, v) in given {
                let v = v
                    .as_f64()
                    .or_else(|| v.as_bool().map(f64::from))
                    .ok_or_else(|| {
                        ApiError::bad(
                            format!("metrics.{k}"),
                            format!("`metrics.{k}` must be a number"),
                        )
                    })?;
                metrics.insert(k.clone(), v);
            }
        }
        let session = session_of(&inner, &id)?;
        let mut session = session.lock().await;
        if session.ended() {
            return Err(ApiError::Conflict(format!(
                "session {id:?} already has its reward"
            )));
        }
        session.finish(&inner.model, reward, metrics);
        let n = session.trajectories(&inner.model).len();
        Ok::<_, ApiError>(respond(
            "application/json",
            json!({"session": id, "trajectories": n}).to_string(),
        ))
    };
    run.await.unwrap_or_else(IntoResponse::into_response)
}

async fn trajectories(
    State(inner): State<Arc<Inner>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    let run = async {
        authorize(&inner, &headers)?;
        let session = session_of(&inner, &id)?;
        let session = session.lock().await;
        let mut text = String::new();
        for t in session.trajectories(&inner.model) {
            text.push_str(
                &serde_json::to_string(&t).map_err(|e| ApiError::Internal(e.to_string()))?,
            );
            text.push('\n');
        }
        Ok::<_, ApiError>(respond("application/jsonl", text))
    };
    run.await.unwrap_or_else(IntoResponse::into_response)
}

async fn forget(
    State(inner): State<Arc<Inner>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    if let Err(e) = authorize(&inner, &headers) {
        return e.into_response();
    }
    match lock(&inner.sessions).remove(&id) {
        Some(_) => StatusCode::NO_CONTENT.into_response(),
        None => ApiError::NotFound(format!("no session {id:?}")).into_response(),
    }
}

/// A 200 with `body` of `content_type`.
fn respond(content_type: &'static str, body: String) -> Response {
    ([(axum::http::header::CONTENT_TYPE, content_type)], body).into_response()
}
