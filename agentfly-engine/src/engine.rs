//! The generation engine: the model on a thread of its own, serving the generation
//! requests of every chain of a rollout with continuous batching.
//!
//! Chains are tokio tasks; each turn sends its context to the engine and awaits the reply,
//! so while some chains run tools the engine decodes for the others. Between two decode
//! steps the engine admits the requests that arrived (prefilled together, identical
//! contexts once) into the running batch, and replies to the sequences that stopped.
//! A request whose caller went away leaves the batch at the next step.

use crate::generate::{
    DecodeBatch, GenerateError, Generation, Sampler, SamplingParams, SequenceSpec,
};
use crate::sync::lock;
use agentfly_core::rollout::{GenerateRequest, Generated, GenerationEnd, Policy, PolicyError};
use agentfly_model::Pretrained;
use burn::module::Param;
use burn::tensor::Tensor;
use std::collections::VecDeque;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// How the engine batches.
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct EngineConfig {
    /// The most sequences decoding at once.
    pub max_batch: usize,
    /// The most prompt tokens prefilled in one admission (at least one request is
    /// always admitted): bounds the memory of the attention scores.
    pub max_prefill_tokens: usize,
    /// When idle, how long to wait after a first request for others to arrive, so
    /// the chains of one sample start together and share their prompt's prefill.
    #[serde(with = "agentfly_core::env::duration_secs")]
    pub gather: Duration,
    /// Positions of earlier contexts whose keys and values are kept for reuse: a request
    /// is prefilled only after the longest cached prefix of its context (the shared
    /// system prompt, or its chain's previous turn). 0 turns the cache off.
    pub prefix_cache_tokens: usize,
    /// The longest a generation request waits for its reply (queued and generating); past
    /// it the chain gets an error and its sequence leaves the batch.
    #[serde(with = "agentfly_core::env::duration_secs")]
    pub request_timeout: Duration,
    /// The longest [`Engine::with_model`] waits for the running sequences to finish and its
    /// task to run (a weight update).
    #[serde(with = "agentfly_core::env::duration_secs")]
    pub task_timeout: Duration,
    /// Packs the weights once for decode's small products (`model::PackedWeight`): on an
    /// AVX-512 CPU, 2.4× the decode speed at 8 sequences and 1.2–1.6× at 32 (BENCHMARKS.md),
    /// for a second copy of the weights in memory. Ignored where the fast kernel or the CPU
    /// backend is missing.
    pub packed_decode: bool,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            max_batch: 64,
            max_prefill_tokens: 16_384,
            gather: Duration::from_millis(3),
            prefix_cache_tokens: 32_768,
            request_timeout: Duration::from_secs(600),
            task_timeout: Duration::from_secs(600),
            packed_decode: true,
        }
    }
}

/// What the engine has done so far.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct EngineStats {
    /// Requests answered.
    pub requests: u64,
    /// Requests dropped because their caller went away.
    pub abandoned: u64,
    /// Decode steps run.
    pub steps: u64,
    /// Sum over steps of the sequences decoded (mean batch = rows / steps).
    pub rows: u64,
    /// Sum over steps of the requests that waited to join the batch (past its limits, or
    /// sent during the step before): with `rows`, what the callers asked of the engine. A
    /// mean batch below the callers' concurrency with this near 0 is the callers' doing
    /// (their chains were calling tools, or had finished), not the scheduler's.
    pub waiting_rows: u64,
    /// Admissions (prefill passes).
    pub prefills: u64,
    /// Prompt tokens prefilled (shared prompts counted once per admission).
    pub prefill_tokens: u64,
    /// Tokens generated.
    pub generated_tokens: u64,
    /// Requests prefilled after a cached prefix.
    pub prefix_hits: u64,
    /// Positions those requests did not have to prefill.
    pub prefix_reused_tokens: u64,
    /// Seconds spent prefilling.
    pub prefill_seconds: f64,
    /// Seconds spent in decode steps.
    pub decode_seconds: f64,
    /// Sum over steps of the sequences decoded times the step's seconds (the mean batch
    /// over the decode time is this over `decode_seconds`).
    pub row_seconds: f64,
    /// Summed seconds requests waited before their prefill.
    pub queue_seconds: f64,
}

impl EngineStats {
    /// Mean sequences per decode step.
    pub fn mean_batch(&self) -> f64 {
        mean(self.rows as f64, self.steps as f64)
    }

    /// Mean sequences decoded over the decode time: steps weighed by their duration, so
    /// that a run's tail of short steps with few sequences counts for its time, not for its
    /// number of steps.
    pub fn mean_batch_over_time(&self) -> f64 {
        mean(self.row_seconds, self.decode_seconds)
    }

    /// Mean requests waiting to join the batch per decode step.
    pub fn mean_waiting(&self) -> f64 {
        mean(self.waiting_rows as f64, self.steps as f64)
    }

    /// Seconds the model was busy.
    pub fn busy_seconds(&self) -> f64 {
        self.prefill_seconds + self.decode_seconds
    }
}

/// `sum / count`, 0 before anything was counted.
fn mean(sum: f64, count: f64) -> f64 {
    if count == 0.0 { 0.0 } else { sum / count }
}

type Reply = oneshot::Sender<Result<Generated, PolicyError>>;

struct Job {
    request: GenerateRequest,
    reply: Reply,
    queued: Instant,
}

type ModelTask = Box<dyn FnOnce(&mut Pretrained) + Send>;

enum Command {
    Generate(Job),
    /// Runs on the model's thread once the batch has drained (weight updates).
    Run(ModelTask),
}

/// The model behind a channel; implements [`Policy`]. Dropping it lets the running
/// sequences finish and stops the thread.
pub struct Engine {
    sender: Mutex<Option<mpsc::Sender<Command>>>,
    stats: Arc<Mutex<EngineStats>>,
    /// The version of the weights served ([`Engine::load_weights`]).
    version: Arc<AtomicU64>,
    /// The weights are released ([`Engine::release_weights`]) until the next load.
    released: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    max_context: usize,
    request_timeout: Duration,
    task_timeout: Duration,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("stats", &self.stats())
            .finish()
    }
}

impl Engine {
    /// Moves `model` to a new thread and starts serving.
    pub fn start(mut model: Pretrained, config: EngineConfig) -> Self {
        if config.packed_decode {
            model.decoder.pack_for_decode();
        }
        let (sender, receiver) = mpsc::channel();
        let stats = Arc::new(Mutex::new(EngineStats::default()));
        let version = Arc::new(AtomicU64::new(0));
        let released = Arc::new(AtomicBool::new(false));
        let max_context = model.config.max_position_embeddings;
        let (request_timeout, task_timeout) = (config.request_timeout, config.task_timeout);
        let worker = Worker {
            model,
            receiver,
            pending: VecDeque::new(),
            batch: DecodeBatch::with_prefix_cache(config.prefix_cache_tokens),
            config,
            stats: stats.clone(),
            version: version.clone(),
            released: released.clone(),
            open: true,
        };
        let thread = std::thread::Builder::new()
            .name("agentfly-engine".into())
            .spawn(move || worker.run())
            .expect("spawn the generation engine's thread");
        Self {
            sender: Mutex::new(Some(sender)),
            stats,
            version,
            released,
            thread: Some(thread),
            max_context,
            request_timeout,
            task_timeout,
        }
    }

    /// The model's context length.
    pub fn max_context(&self) -> usize {
        self.max_context
    }

    /// What the engine has done so far.
    pub fn stats(&self) -> EngineStats {
        lock(&self.stats).clone()
    }

    fn send(&self, command: Command) -> Result<(), PolicyError> {
        lock(&self.sender)
            .as_ref()
            .ok_or_else(stopped)?
            .send(command)
            .map_err(|_| stopped())
    }

    /// Runs `f` on the model's thread once the sequences already running have finished
    /// (requests sent after it wait for it): e.g. loading new weights after a training
    /// step. Blocks until done, at most `task_timeout`; call it from outside the async
    /// runtime or through `spawn_blocking`.
    pub fn with_model<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Pretrained) -> R + Send + 'static,
    ) -> Result<R, PolicyError> {
        let (tx, rx) = mpsc::channel();
        self.send(Command::Run(Box::new(move |model| {
            let _ = tx.send(f(model));
        })))?;
        rx.recv_timeout(self.task_timeout).map_err(|e| match e {
            mpsc::RecvTimeoutError::Timeout => PolicyError(format!(
                "the engine did not run a model task (a weight update) within {:.0?}: the \
                 sequences before it did not finish (rollout.engine.task_timeout)",
                self.task_timeout
            )),
            mpsc::RecvTimeoutError::Disconnected => stopped(),
        })
    }

    /// Serves `decoder` from now on, as the weights of `version` (recorded in every later
    /// generation): once the running sequences have finished, as [`Engine::with_model`].
    pub fn load_weights(
        &self,
        decoder: agentfly_model::model::Decoder,
        version: u64,
    ) -> Result<(), PolicyError> {
        let (served, released) = (self.version.clone(), self.released.clone());
        self.with_model(move |model| {
            model.decoder = decoder;
            served.store(version, Ordering::SeqCst);
            released.store(false, Ordering::SeqCst);
        })
    }

    /// Frees the weights served, their packed copy and every cached key and value, once
    /// the running sequences have finished, until the next [`Engine::load_weights`]: for a
    /// training update that replaces them anyway, whose optimizer then writes its weights
    /// in place instead of copying the buffers the engine shared with it. Generation
    /// requests sent meanwhile get an error.
    pub fn release_weights(&self) -> Result<(), PolicyError> {
        let released = self.released.clone();
        self.with_model(move |model| {
            let device = model.decoder.embed.device();
            let decoder = &mut model.decoder;
            decoder.blocks = Vec::new();
            decoder.lm_head = None;
            decoder.packed_head = None;
            decoder.embed = Param::from_tensor(Tensor::empty([0, 0], &device));
            released.store(true, Ordering::SeqCst);
        })
    }

    /// Names the weights served now the policy of `version` (unchanged weights that took a
    /// new number); call it when no sequence is running.
    pub fn set_policy_version(&self, version: u64) {
        self.version.store(version, Ordering::SeqCst);
    }

    /// Stops accepting requests, lets the running ones finish and joins the thread.
    pub fn shutdown(&mut self) {
        lock(&self.sender).take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.shutdown();
    }
}

#[agentfly_core::async_trait]
impl Policy for Engine {
    async fn generate(&self, request: GenerateRequest) -> Result<Generated, PolicyError> {
        let (reply, answer) = oneshot::channel();
        self.send(Command::Generate(Job {
            request,
            reply,
            queued: Instant::now(),
        }))?;
        let timeout = self.request_timeout;
        match tokio::time::timeout(timeout, answer).await {
            Ok(reply) => reply.map_err(|_| stopped())?,
            // Dropping `answer` tells the engine to drop the sequence.
            Err(_) => Err(PolicyError(format!(
                "no reply from the generation engine within {timeout:.0?} \
                 (rollout.engine.request_timeout): it is overloaded or stuck"
            ))),
        }
    }
}

fn stopped() -> PolicyError {
    PolicyError("the generation engine has stopped".into())
}

struct Worker {
    model: Pretrained,
    config: EngineConfig,
    receiver: mpsc::Receiver<Command>,
    pending: VecDeque<Command>,
    batch: DecodeBatch<Reply>,
    stats: Arc<Mutex<EngineStats>>,
    version: Arc<AtomicU64>,
    /// The weights are released: requests are refused until new ones load.
    released: Arc<AtomicBool>,
    /// The engine still accepts requests.
    open: bool,
}

impl Worker {
    fn run(mut self) {
        loop {
            if self.batch.is_empty() && self.pending.is_empty() {
                if !self.open {
                    return;
                }
                match self.receiver.recv() {
                    Ok(command) => self.pending.push_back(command),
                    Err(_) => return,
                }
                let deadline = Instant::now() + self.config.gather;
                while let Some(left) = deadline.checked_duration_since(Instant::now()) {
                    match self.receiver.recv_timeout(left) {
                        Ok(command) => self.pending.push_back(command),
                        Err(_) => break,
                    }
                }
            }
            self.drain();
            self.run_tasks();
            self.admit();
            self.step();
        }
    }

    /// Moves every waiting command to `pending`.
    fn drain(&mut self) {
        loop {
            match self.receiver.try_recv() {
                Ok(command) => self.pending.push_back(command),
                Err(mpsc::TryRecvError::Empty) => return,
                Err(mpsc::TryRecvError::Disconnected) => {
                    self.open = false;
                    return;
                }
            }
        }
    }

    /// Runs the model tasks at the front of the queue, once no sequence is running.
    fn run_tasks(&mut self) {
        while self.batch.is_empty() && matches!(self.pending.front(), Some(Command::Run(_))) {
            if let Some(Command::Run(task)) = self.pending.pop_front() {
                let model = &mut self.model;
                // A panicking task drops its reply channel: the caller gets an error.
                let _ = std::panic::catch_unwind(AssertUnwindSafe(move || task(model)));
                // The weights may have changed: cached keys and values are stale, and so
                // are the packed weights.
                self.batch.clear_prefix_cache();
                if self.released.load(Ordering::SeqCst) {
                    // No sequence runs: this frees the batch's cache buffers.
                    self.batch.abort();
                } else if self.config.packed_decode {
                    self.model.decoder.pack_for_decode();
                }
            }
        }
    }

    /// Admits the generation requests at the front of the queue, within the batch and
    /// prefill limits.
    fn admit(&mut self) {
        let mut room = self
            .config
            .max_batch
            .max(1)
            .saturating_sub(self.batch.len());
        let mut tokens = 0;
        let mut jobs = Vec::new();
        while room > 0 {
            let Some(Command::Generate(job)) = self.pending.front() else {
                break;
            };
            let len = job.request.context.len();
            if !jobs.is_empty() && tokens + len > self.config.max_prefill_tokens {
                break;
            }
            let Some(Command::Generate(job)) = self.pending.pop_front() else {
                unreachable!("the front was just seen to be a request");
            };
            if job.reply.is_closed() {
                lock(&self.stats).abandoned += 1;
                continue;
            }
            if self.released.load(Ordering::SeqCst) {
                let _ = job.reply.send(Err(PolicyError(
                    "the generation engine's weights are released for a training update; \
                     generate after the update has loaded new ones"
                        .into(),
                )));
                continue;
            }
            tokens += len;
            room -= 1;
            jobs.push(job);
        }
        if jobs.is_empty() {
            return;
        }
        let start = Instant::now();
        let mut sequences = Vec::with_capacity(jobs.len());
        let mut queue_seconds = 0.0;
        for job in jobs {
            queue_seconds += start.duration_since(job.queued).as_secs_f64();
            match self.spec(&job.request) {
                Ok(spec) => sequences.push((job.reply, spec)),
                Err(e) => {
                    let _ = job.reply.send(Err(PolicyError(e.to_string())));
                }
            }
        }
        let model = &self.model;
        let batch = &mut self.batch;
        let admitted = std::panic::catch_unwind(AssertUnwindSafe(|| batch.admit(model, sequences)));
        let done = match admitted {
            Ok(done) => done,
            Err(panic) => {
                self.fail_all(&panic);
                return;
            }
        };
        let (hits, reused) = self.batch.prefix_stats();
        let mut stats = lock(&self.stats);
        stats.prefix_hits = hits;
        stats.prefix_reused_tokens = reused;
        stats.prefills += 1;
        stats.prefill_tokens += tokens as u64;
        stats.prefill_seconds += start.elapsed().as_secs_f64();
        stats.queue_seconds += queue_seconds;
        drop(stats);
        self.reply(done);
    }

    fn spec(&self, request: &GenerateRequest) -> Result<SequenceSpec, GenerateError> {
        crate::generate::check_prompts(&self.model, std::slice::from_ref(&request.context))?;
        let params = SamplingParams {
            temperature: request.temperature,
            top_k: request.top_k,
            top_p: request.top_p,
            seed: request.seed,
            ..SamplingParams::default()
        };
        let mut stop_ids = request.stop_ids.clone();
        stop_ids.extend(self.model.eos_ids());
        Ok(SequenceSpec {
            prompt: request.context.clone(),
            sampler: Sampler::new(&params, 0),
            max_new_tokens: request.max_new_tokens,
            stop_ids,
            stop_strings: request.stop_strings.clone(),
        })
    }

    fn step(&mut self) {
        let dropped = self.batch.retain(|reply| !reply.is_closed());
        if self.batch.is_empty() {
            lock(&self.stats).abandoned += dropped as u64;
            return;
        }
        let start = Instant::now();
        let rows = self.batch.len() as u64;
        let waiting = self
            .pending
            .iter()
            .filter(|c| matches!(c, Command::Generate(_)))
            .count() as u64;
        let model = &self.model;
        let batch = &mut self.batch;
        let stepped = std::panic::catch_unwind(AssertUnwindSafe(|| {
            batch.step(model, model.tokenizer.as_ref())
        }));
        let done = match stepped {
            Ok(done) => done,
            Err(panic) => {
                self.fail_all(&panic);
                return;
            }
        };
        let mut stats = lock(&self.stats);
        stats.abandoned += dropped as u64;
        stats.steps += 1;
        stats.rows += rows;
        stats.waiting_rows += waiting;
        stats.generated_tokens += rows;
        let seconds = start.elapsed().as_secs_f64();
        stats.decode_seconds += seconds;
        stats.row_seconds += rows as f64 * seconds;
        drop(stats);
        self.reply(done);
    }

    fn reply(&self, done: Vec<(Reply, Generation)>) {
        lock(&self.stats).requests += done.len() as u64;
        for (reply, generation) in done {
            let end = match generation.finish_reason {
                crate::generate::FinishReason::Stop => GenerationEnd::Stop,
                crate::generate::FinishReason::Length => GenerationEnd::Length,
                crate::generate::FinishReason::NonFinite => {
                    let _ = reply.send(Err(PolicyError(format!(
                        "the model's logits are not finite (NaN or infinite) after {} tokens; \
                         no token was sampled",
                        generation.new_ids.len()
                    ))));
                    continue;
                }
            };
            let _ = reply.send(Ok(Generated {
                ids: generation.new_ids,
                logprobs: generation.logprobs,
                end,
                policy_version: self.version.load(Ordering::SeqCst),
            }));
        }
    }

    /// The model panicked: every running sequence gets the error, the engine goes on.
    fn fail_all(&mut self, panic: &Box<dyn std::any::Any + Send>) {
        let message = agentfly_core::tool::panic_message(panic.as_ref());
        self.batch.clear_prefix_cache();
        for reply in self.batch.abort() {
            let _ = reply.send(Err(PolicyError(format!("the model panicked: {message}"))));
        }
    }
}
