//! How a binary finds its tools and rewards: `inventory` collects every `#[tool]` and
//! `#[reward]` of the crates it links. A crate nothing names is not linked — name it
//! with [`link!`](crate::link).

use crate::origin::Origin;
use crate::reward::RewardSpec;
use crate::tool::ToolSpec;

/// Looking up tools and rewards failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    /// No tool of that name is linked.
    #[error("unknown tool `{name}`; the linked tools are: {}", list(known))]
    UnknownTool {
        /// The name asked for.
        name: String,
        /// The names that exist.
        known: Vec<String>,
    },
    /// No reward of that name is linked.
    #[error("unknown reward `{name}`; the linked rewards are: {}", list(known))]
    UnknownReward {
        /// The name asked for.
        name: String,
        /// The names that exist.
        known: Vec<String>,
    },
    /// Two linked tools share a name.
    #[error(
        "two tools are named `{name}`: one in {first}, one in {second}; rename one with \
         #[tool(name = \"...\")]"
    )]
    DuplicateTool {
        /// The shared name.
        name: String,
        /// One definition.
        first: Origin,
        /// The other definition.
        second: Origin,
    },
    /// A tool found at run time (an MCP server's) has the name of one already in the
    /// toolbox.
    #[error(
        "two tools are named `{name}`: one in {first}, one in {second}; keep one (an MCP \
         server's `tools = [...]` chooses which of its tools join)"
    )]
    ClashingTool {
        /// The shared name.
        name: String,
        /// The tool already in the toolbox.
        first: Origin,
        /// The one added.
        second: Origin,
    },
    /// Two linked rewards share a name.
    #[error(
        "two rewards are named `{name}`: one in {first}, one in {second}; rename one with \
         #[reward(name = \"...\")]"
    )]
    DuplicateReward {
        /// The shared name.
        name: String,
        /// One definition.
        first: Origin,
        /// The other definition.
        second: Origin,
    },
}

fn list(names: &[String]) -> String {
    if names.is_empty() {
        "(none: is the crate that defines them linked? see agentfly_core::link!)".to_string()
    } else {
        names.join(", ")
    }
}

/// Every linked tool, sorted by name; an error on a duplicate name.
pub fn tools() -> Result<Vec<&'static ToolSpec>, RegistryError> {
    collect(inventory::iter::<ToolSpec>.into_iter(), |t| {
        (t.name, t.origin)
    })
    .map_err(|(name, first, second)| RegistryError::DuplicateTool {
        name,
        first,
        second,
    })
}

/// Every linked reward, sorted by name; an error on a duplicate name.
pub fn rewards() -> Result<Vec<&'static RewardSpec>, RegistryError> {
    collect(inventory::iter::<RewardSpec>.into_iter(), |r| {
        (r.name, r.origin)
    })
    .map_err(|(name, first, second)| RegistryError::DuplicateReward {
        name,
        first,
        second,
    })
}

/// Checks the whole registry once, as a binary should at start-up.
pub fn check() -> Result<(), RegistryError> {
    tools()?;
    rewards()?;
    Ok(())
}

/// The items of `all` named in `names`, in that order and without repeats; an unknown
/// name becomes `unknown(name, known names)`.
pub(crate) fn select<T: 'static, S: AsRef<str>>(
    all: &[&'static T],
    names: &[S],
    name_of: impl Fn(&T) -> &'static str,
    unknown: impl Fn(String, Vec<String>) -> RegistryError,
) -> Result<Vec<&'static T>, RegistryError> {
    let mut chosen: Vec<&'static T> = Vec::with_capacity(names.len());
    for name in names {
        let name = name.as_ref();
        let item = all.iter().find(|t| name_of(t) == name).ok_or_else(|| {
            unknown(
                name.to_string(),
                all.iter().map(|t| name_of(t).to_string()).collect(),
            )
        })?;
        if !chosen.iter().any(|c| name_of(c) == name) {
            chosen.push(*item);
        }
    }
    Ok(chosen)
}

fn collect<T>(
    items: impl Iterator<Item = &'static T>,
    key: impl Fn(&T) -> (&'static str, Origin),
) -> Result<Vec<&'static T>, (String, Origin, Origin)> {
    let mut items: Vec<&'static T> = items.collect();
    // inventory's order is unspecified: sort by name, then by place, for stable output.
    items.sort_by_key(|item| {
        let (name, origin) = key(item);
        (name, origin.file, origin.line)
    });
    for pair in items.windows(2) {
        let (a, first) = key(pair[0]);
        let (b, second) = key(pair[1]);
        if a == b {
            return Err((a.to_string(), first, second));
        }
    }
    Ok(items)
}

/// Names crates whose tools and rewards a binary must link, e.g.
/// `agentfly_core::link!(agentfly_tools, my_tools);`. Without it the linker drops a crate
/// that nothing else names, and its tools are silently missing.
#[macro_export]
macro_rules! link {
    ($($krate:ident),+ $(,)?) => {
        $( #[allow(unused_imports)] use $krate as _; )+
    };
}
