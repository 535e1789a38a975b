//! A policy the endpoint can own while the real one is borrowed elsewhere: requests go
//! through a channel to whoever holds the policy (the trainer, during a rollout), which
//! serves them with [`PolicyRequests::serve`]. A request whose caller went away (a client
//! disconnected) is dropped, and with it its place in the engine's batch.

use agentfly_core::rollout::{GenerateRequest, Generated, Policy, PolicyError};
use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use tokio::sync::{mpsc, oneshot};

type Reply = oneshot::Sender<Result<Generated, PolicyError>>;

/// The owned end: a [`Policy`] whose requests wait for [`PolicyRequests::serve`].
#[derive(Clone)]
pub struct ChannelPolicy {
    tx: mpsc::UnboundedSender<(GenerateRequest, Reply)>,
}

/// The serving end.
pub struct PolicyRequests {
    rx: mpsc::UnboundedReceiver<(GenerateRequest, Reply)>,
}

/// A connected pair.
pub fn policy_channel() -> (ChannelPolicy, PolicyRequests) {
    let (tx, rx) = mpsc::unbounded_channel();
    (ChannelPolicy { tx }, PolicyRequests { rx })
}

#[agentfly_core::async_trait]
impl Policy for ChannelPolicy {
    async fn generate(&self, request: GenerateRequest) -> Result<Generated, PolicyError> {
        let (reply, answer) = oneshot::channel();
        self.tx
            .send((request, reply))
            .map_err(|_| PolicyError("the policy is no longer served".into()))?;
        answer.await.map_err(|_| {
            PolicyError("the policy is not being served now (no rollout is running)".into())
        })?
    }
}

impl PolicyRequests {
    /// Serves requests with `policy`, all at once (the policy batches them), until every
    /// [`ChannelPolicy`] is dropped. Run it beside the work that makes the requests and drop
    /// it when that ends; requests arriving later wait for the next call.
    pub async fn serve(&mut self, policy: &dyn Policy) {
        let mut running = FuturesUnordered::new();
        loop {
            tokio::select! {
                job = self.rx.recv() => match job {
                    Some((request, mut reply)) => running.push(async move {
                        tokio::select! {
                            out = policy.generate(request) => { let _ = reply.send(out); }
                            () = reply.closed() => {}
                        }
                    }),
                    None => break,
                },
                Some(()) = running.next(), if !running.is_empty() => {}
            }
        }
        while running.next().await.is_some() {}
    }
}
