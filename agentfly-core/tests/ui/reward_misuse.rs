use agentfly_core::reward;

#[reward(terminal)]
fn ends(response: &str) -> f32 {
    response.len() as f32
}

struct Ledger;

#[reward(env = Ledger)]
fn no_env(response: &str) -> f32 {
    response.len() as f32
}

#[reward]
fn wrong_return(response: &str) -> String {
    response.to_string()
}

fn main() {}
