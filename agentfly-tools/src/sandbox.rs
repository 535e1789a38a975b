//! What a run that executes model-written code can count on: whether its toolbox uses the
//! Python sandbox, the isolation the sandbox gets on this machine (probed by starting one,
//! so it is what holds, not what was asked for), and the refusal to train without network
//! isolation unless the user allows it.

use agentfly_core::Toolbox;
use agentfly_envs::python::Isolation;
use agentfly_envs::{PythonSandbox, SandboxConfig};

/// Does a tool of `toolbox` run code in a [`PythonSandbox`]?
pub fn uses_sandbox(toolbox: &Toolbox) -> bool {
    toolbox.tools().iter().any(|t| {
        t.options
            .env
            .is_some_and(|e| e.rsplit("::").next() == Some("PythonSandbox"))
    })
}

/// What a run needs the sandbox for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// Training: model-written code runs unattended for hours, and what it does feeds
    /// the update.
    Train,
    /// Evaluating or trying out.
    Evaluate,
}

/// The isolation a sandbox with the default configuration (as runs make them) gets here.
/// Starts one, asks it and closes it; call it outside an async runtime.
pub fn probe() -> Result<Isolation, String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("a runtime for the sandbox probe: {e}"))?;
    runtime
        .block_on(PythonSandbox::probe_isolation(&SandboxConfig::default()))
        .map_err(|e| e.to_string())
}

/// Before a run with `toolbox`: when it uses the sandbox, says on stderr what isolation
/// holds and returns it; refuses to `Train` without a network namespace unless
/// `allow_network`. `None` when the toolbox runs no code.
pub fn check(
    toolbox: &Toolbox,
    purpose: Purpose,
    allow_network: bool,
) -> Result<Option<Isolation>, String> {
    if !uses_sandbox(toolbox) {
        return Ok(None);
    }
    let isolation = probe()?;
    eprintln!("sandbox: {}", isolation.describe());
    if !isolation.complete() {
        eprintln!(
            "sandbox: what says NO is not enforced on this machine (as root with \
             namespaces, everything is)"
        );
    }
    decide(&isolation, purpose, allow_network)?;
    Ok(Some(isolation))
}

/// Refuses to `Train` without a network namespace unless `allow_network`.
pub fn decide(isolation: &Isolation, purpose: Purpose, allow_network: bool) -> Result<(), String> {
    if purpose == Purpose::Train && !isolation.network_namespace && !allow_network {
        return Err(format!(
            "refusing to train with code tools: the sandbox cannot isolate the network on \
             this machine ({}), so model-written code could reach it; run as root or where \
             unprivileged user namespaces work, or pass --allow-network to accept it",
            isolation.describe()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn training_without_network_isolation_needs_the_users_consent() {
        let open = Isolation::default();
        assert!(decide(&open, Purpose::Train, false).is_err());
        assert!(decide(&open, Purpose::Train, true).is_ok());
        assert!(decide(&open, Purpose::Evaluate, false).is_ok());
        let closed = Isolation {
            network_namespace: true,
            ..Isolation::default()
        };
        assert!(decide(&closed, Purpose::Train, false).is_ok());
    }

    #[test]
    fn only_toolboxes_that_run_code_use_the_sandbox() {
        assert!(uses_sandbox(
            &Toolbox::from_names(&["code_interpreter", "search"]).unwrap()
        ));
        assert!(!uses_sandbox(
            &Toolbox::from_names(&["calculator"]).unwrap()
        ));
    }
}
