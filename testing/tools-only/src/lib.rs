//! Nothing but a dependency on `agentfly-tools`: the tests check that a crate in this
//! position sees the standard tools and rewards through the registry.
