use agentfly_core::{CallContext, reward, tool};

/// A synchronous tool cannot call other tools.
#[tool]
fn sync_caller(ctx: &mut CallContext, text: String) -> String {
    let _ = ctx;
    text
}

/// Twice is once too many.
#[tool]
async fn twice(a: &mut CallContext, b: &mut CallContext) -> String {
    let _ = (a, b);
    String::new()
}

/// A reward reads, it does not call tools.
#[reward]
fn scorer(ctx: &mut CallContext, response: &str) -> f32 {
    let _ = (ctx, response);
    0.0
}

fn main() {}
