#!/usr/bin/env python3
"""Data of the git example (git.toml): a small repository, questions about its commits, and
SFT demonstrations whose tool results come from the real `mcp-server-git`.

    .venv-mcp/bin/python examples/runs/git/make_data.py          # from the repository root

writes
    target/runs/git-repo/            a git repository: 120 commits by 8 fictional authors,
                                     fixed dates, each commit changing one tiny file
    examples/runs/git/train.jsonl    200 questions {"id", "question", "answer", "kind", "commit"}
    examples/runs/git/val.jsonl       40 questions (10 commits, 4 questions each)
    examples/runs/git/test.jsonl     100 questions (25 commits, 4 questions each)
    examples/runs/git/demos.jsonl     48 demonstrations (training commits only; none of
                                     train.jsonl's questions) {"id", "messages", "answer", ...}

The commits are split three ways first: no validation or test commit is asked about in
train.jsonl or shown in demos.jsonl. Questions name the commit by its 7-character hash.
git.toml starts the server in the repository (`cwd`) confined to it (`--repository .`),
so the model passes `repo_path` "." and no file here names a machine's path.

The repository and the question files use only Python's standard library and the git
command line. The demonstrations (and the checks) call the real server through the
official MCP Python SDK; run the script with the interpreter of .venv-mcp, or let it
re-run itself there (it does when `mcp` cannot be imported and .venv-mcp exists).
Everything is determined by --seed: the same seed gives the same commits, hashes,
questions and demonstrations.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
from datetime import datetime, timedelta, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]  # the agentfly checkout (examples/runs/git/ -> ../../..)
DEFAULT_REPO = ROOT / "target" / "runs" / "git-repo"
VENV_PYTHON = ROOT / ".venv-mcp" / "bin" / "python"
DEFAULT_SERVER = ROOT / ".venv-mcp" / "bin" / "mcp-server-git"

KINDS = ("author", "date", "file", "message")
# A file in the .git directory of each repository this script makes.
MARKER = "agentfly-git-example"

# Fictional authors: name, email, UTC offset in minutes (the date a commit shows, and so
# its answer, is the author's local date), and how often each commits.
AUTHORS = [
    ("Maren Okafor", "maren.okafor@lantern.dev", 60, 5),
    ("Tobias Reyes", "tobias@reyes.name", -360, 3),
    ("Priya Vandermeer", "priya.v@example.org", 330, 4),
    ("Jun Halvorsen", "jun.halvorsen@example.net", 540, 2),
    ("Aiko Brandt", "aiko.brandt@lantern.dev", 120, 3),
    ("Dmitri Olsen", "dolsen@example.com", -300, 2),
    ("Sofia Marchetti", "sofia@marchetti.it", 0, 3),
    ("Kwame Lindqvist", "kwame.lindqvist@example.org", -180, 2),
]

# The project's files: path, how a setting is written there, and how a message names it.
FILES = [
    ("README.md", "md", "readme"),
    ("CHANGELOG.md", "md", "changelog"),
    ("Makefile", "make", "makefile"),
    ("docs/install.md", "md", "install guide"),
    ("docs/usage.md", "md", "usage guide"),
    ("docs/faq.md", "md", "faq"),
    ("config/defaults.toml", "toml", "default config"),
    ("config/themes.toml", "toml", "theme config"),
    ("scripts/release.sh", "sh", "release script"),
    ("scripts/lint.sh", "sh", "lint script"),
    ("src/lantern/cli.py", "py", "cli"),
    ("src/lantern/config.py", "py", "config loader"),
    ("src/lantern/cache.py", "py", "cache"),
    ("src/lantern/render.py", "py", "renderer"),
    ("src/lantern/pager.py", "py", "pager"),
    ("src/lantern/net.py", "py", "network client"),
    ("src/lantern/auth.py", "py", "auth module"),
    ("src/lantern/search.py", "py", "search index"),
    ("src/lantern/export.py", "py", "exporter"),
    ("tests/test_cli.py", "test", "cli tests"),
    ("tests/test_cache.py", "test", "cache tests"),
    ("tests/test_render.py", "test", "renderer tests"),
    ("tests/test_search.py", "test", "search tests"),
    ("tests/test_pager.py", "test", "pager tests"),
]

THINGS = [
    "retry budget", "cache ttl", "page size", "color depth", "log level", "tab width",
    "max depth", "batch size", "idle timeout", "history limit", "font scale",
    "search window", "token lifetime", "ping interval", "worker count", "queue length",
    "row height", "column gap", "lock timeout", "sample rate", "backoff factor",
    "compression level", "index stride", "preview lines", "wrap margin", "socket buffer",
    "upload limit", "session ttl", "scroll step", "undo depth", "status width",
    "error budget", "fetch depth", "shard count", "banner width", "line limit",
]

MAX_LINES = 3  # a file holds at most this many settings, so every diff stays tiny


def line_of(style: str, thing: str, value: int) -> str:
    """How `thing = value` is written in a file of `style`."""
    upper = thing.upper().replace(" ", "_")
    snake = thing.replace(" ", "_")
    return {
        "md": f"- {thing.capitalize()}: {value}",
        "make": f"{upper} ?= {value}",
        "toml": f"{snake} = {value}",
        "sh": f"{upper}={value}",
        "py": f"{upper} = {value}",
        "test": f"assert settings.{snake} == {value}",
    }[style]


def add_verb(style: str) -> str:
    return {"md": "Document", "test": "Test"}.get(style, "Add")


def plan_commits(rng: random.Random, n: int) -> list[dict]:
    """The commits, oldest first: author, date, the file and its new text, the message."""
    files: dict[str, dict[str, int]] = {}
    messages: set[str] = set()
    commits = []
    moment = datetime(2023, 2, 6, 8, 0, tzinfo=timezone.utc)
    weights = [a[3] for a in AUTHORS]
    for index in range(n):
        name, email, offset, _ = rng.choices(AUTHORS, weights)[0]
        # 5 to 60 hours after the one before, written in the author's own time zone.
        moment += timedelta(hours=rng.randint(5, 60), minutes=rng.randint(0, 59),
                            seconds=rng.randint(0, 59))
        local = moment.astimezone(timezone(timedelta(minutes=offset)))
        if index == 0:
            path, style, area = FILES[0]
        else:
            path, style, area = rng.choice(FILES)
        settings = files.setdefault(path, {})
        while True:
            if len(settings) < MAX_LINES and (not settings or rng.random() < 0.5):
                thing = rng.choice([t for t in THINGS if t not in settings])
                value = rng.randint(2, 480)
                message = f"{add_verb(style)} {thing} in {area}"
            else:
                thing = rng.choice(sorted(settings))
                old = settings[thing]
                value = rng.randint(2, 480)
                if value == old:
                    continue
                verb = "Raise" if value > old else "Lower"
                message = f"{verb} {thing} in {area} to {value}"
            if message not in messages:
                break
        messages.add(message)
        settings[thing] = value
        text = "".join(line_of(style, t, v) + "\n" for t, v in settings.items())
        commits.append({
            "author": name,
            "email": email,
            "date": local.strftime("%Y-%m-%d"),
            "git_date": local.strftime("%Y-%m-%d %H:%M:%S %z"),
            "file": path,
            "text": text,
            "message": message,
        })
    return commits


def git(repo: Path, *args: str, env: dict | None = None) -> str:
    """Runs git in `repo` without the user's or the system's configuration."""
    base = {
        **os.environ,
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_CONFIG_NOSYSTEM": "1",
        "LC_ALL": "C",
    }
    out = subprocess.run(["git", *args], cwd=repo, env={**base, **(env or {})},
                         check=True, capture_output=True, text=True)
    return out.stdout


def build_repo(where: Path, commits: list[dict]) -> None:
    """Creates the repository at `where` (an empty directory), one commit per entry."""
    git(where, "-c", "init.defaultBranch=main", "init", "-q")
    for c in commits:
        path = where / c["file"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(c["text"])
        who = {
            "GIT_AUTHOR_NAME": c["author"], "GIT_AUTHOR_EMAIL": c["email"],
            "GIT_AUTHOR_DATE": c["git_date"],
            "GIT_COMMITTER_NAME": c["author"], "GIT_COMMITTER_EMAIL": c["email"],
            "GIT_COMMITTER_DATE": c["git_date"],
        }
        git(where, "add", "--", c["file"])
        git(where, "commit", "-q", "--no-verify", "-m", c["message"], env=who)
    hashes = git(where, "log", "--reverse", "--format=%H").split()
    assert len(hashes) == len(commits)
    for c, h in zip(commits, hashes):
        c["hash"] = h
        c["short"] = h[:7]
    # Every 7-character prefix must name one object, or `git_show` cannot resolve it.
    objects = git(where, "cat-file", "--batch-all-objects", "--batch-check=%(objectname)")
    prefixes: dict[str, int] = {}
    for h in objects.split():
        prefixes[h[:7]] = prefixes.get(h[:7], 0) + 1
    clashes = [c["short"] for c in commits if prefixes[c["short"]] != 1]
    if clashes:
        sys.exit(f"7-character hashes shared with other objects: {clashes}; try another --seed")
    # What --force may replace: only a repository this script made.
    (where / ".git" / MARKER).write_text("made by examples/runs/git/make_data.py\n")


def place_repo(built: Path, repo: Path, force: bool) -> None:
    """Moves the fresh build to `repo`; an identical repository already there is kept."""
    if repo.exists():
        same = False
        try:
            same = git(repo, "rev-parse", "HEAD").strip() == git(built, "rev-parse", "HEAD").strip() \
                and git(repo, "status", "--porcelain") == ""
        except subprocess.CalledProcessError:
            pass
        if same:
            shutil.rmtree(built)
            print(f"repository {repo}: already there, the same commits")
            return
        if not force:
            shutil.rmtree(built)
            sys.exit(f"{repo} exists and is not this seed's repository: remove it or pass --force")
        if not (repo / ".git" / MARKER).is_file():
            shutil.rmtree(built)
            sys.exit(f"{repo} was not made by this script: it is left as it is (choose another --repo)")
        shutil.rmtree(repo)
    repo.parent.mkdir(parents=True, exist_ok=True)
    built.rename(repo)
    print(f"repository {repo}: written")


def question(kind: str, c: dict) -> tuple[str, str]:
    """A question about commit `c` and its answer."""
    h = c["short"]
    return {
        "author": (f"Who is the author of commit {h}?", c["author"]),
        "date": (f"On what date (YYYY-MM-DD) was commit {h} made?", c["date"]),
        "file": (f"Which file did commit {h} change?", c["file"]),
        "message": (f"What is the message of commit {h}?", c["message"]),
    }[kind]


def sample(split: str, n: int, kind: str, c: dict) -> dict:
    q, a = question(kind, c)
    return {"id": f"git-{split}-{n:03d}", "question": q, "answer": a, "kind": kind,
            "commit": c["short"]}


def hermes_call(name: str, arguments: dict) -> str:
    """A call as the jobs' demonstrations write it: serde_json's compact JSON (keys in
    order) between the tags, each on its own line (agentfly-tools/src/tasks/wiki_qa.rs,
    `hermes_call`)."""
    body = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False,
                      separators=(",", ":"))
    return f"<tool_call>\n{body}\n</tool_call>"


def render(name: str, result) -> str:
    """The observation agentfly's chain gets from an MCP call result: the text of each
    block joined with newlines, other blocks as a bracketed line, the structured content
    when there is nothing else (agentfly-mcp/src/tools.rs, `render`); a result flagged
    isError becomes agentfly's error text (agentfly-core/src/tool/invoke.rs, `failed`)."""
    parts = []
    for block in result.content:
        kind = getattr(block, "type", None)
        if kind == "text":
            parts.append(block.text)
        elif kind == "image":
            parts.append(f"[an image, {block.mime_type}]")
        elif kind == "audio":
            parts.append(f"[audio, {block.mime_type}]")
        elif kind == "resource":
            inner = block.resource
            text = getattr(inner, "text", None)
            parts.append(text if text is not None else f"[a resource: {inner.uri}]")
        elif kind == "resource_link":
            parts.append(f"[a resource: {block.uri}]")
        else:
            parts.append("[content of a kind agentfly does not read]")
    structured = getattr(result, "structured_content", None)
    if not parts and structured is not None:
        parts.append(json.dumps(structured, ensure_ascii=False, separators=(",", ":")))
    text = "\n".join(parts)
    if result.is_error:
        return f"Error from tool `{name}`: {text}"
    return text


async def show_all(server: Path, repo: Path, revisions: list[str]) -> dict[str, tuple[bool, str]]:
    """`git_show` of each revision through the official MCP SDK, the server started as
    agentfly starts it for git.toml: `SERVER --repository .` running in the repository
    (`cwd`), its stderr discarded, each call's `repo_path` ".". Returns each revision's
    (is_error, observation)."""
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    out = {}
    with open(os.devnull, "w") as devnull:
        params = StdioServerParameters(command=str(server), args=["--repository", "."],
                                       cwd=str(repo))
        async with stdio_client(params, errlog=devnull) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                listed = await session.list_tools()
                if "git_show" not in {t.name for t in listed.tools}:
                    sys.exit(f"{server} lists no git_show tool")
                for rev in revisions:
                    result = await session.call_tool(
                        "git_show", {"repo_path": ".", "revision": rev})
                    out[rev] = (bool(result.is_error), render("git_show", result))
    return out


def write_jsonl(path: Path, rows: list[dict]) -> None:
    with path.open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    print(f"{path}: {len(rows)} lines")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repo", type=Path, default=DEFAULT_REPO,
                   help="where the repository goes (made absolute; default %(default)s)")
    p.add_argument("--out", type=Path, default=HERE, help="where the JSONL files go")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--commits", type=int, default=120)
    p.add_argument("--test-commits", type=int, default=25)
    p.add_argument("--val-commits", type=int, default=10)
    p.add_argument("--train", type=int, default=200, help="training questions")
    p.add_argument("--demos", type=int, default=48, help="demonstrations")
    p.add_argument("--server", type=Path, default=None,
                   help="the mcp-server-git executable (default: beside this Python, "
                        f"else {DEFAULT_SERVER})")
    p.add_argument("--check", type=int, default=5,
                   help="test questions whose answer is checked in the real observation")
    p.add_argument("--force", action="store_true",
                   help="replace a different repository at --repo (only one this script made)")
    args = p.parse_args()

    try:
        import mcp  # noqa: F401
    except ImportError:
        # (The venv's python is a link to the system's: compare the environments.)
        if VENV_PYTHON.exists() and Path(sys.prefix).resolve() != VENV_PYTHON.parents[1].resolve():
            print(f"the MCP SDK is not importable here; running again with {VENV_PYTHON}",
                  file=sys.stderr)
            os.execv(VENV_PYTHON, [str(VENV_PYTHON), str(Path(__file__).resolve()), *sys.argv[1:]])
        sys.exit("the demonstrations need the MCP Python SDK (pip install mcp mcp-server-git)")
    server = args.server
    if server is None:
        beside = Path(sys.executable).parent / "mcp-server-git"
        server = beside if beside.exists() else DEFAULT_SERVER
    server = server.resolve()
    if not server.exists():
        sys.exit(f"no mcp-server-git at {server} (--server)")

    repo = args.repo.absolute()
    rng = random.Random(args.seed)
    commits = plan_commits(rng, args.commits)
    repo.parent.mkdir(parents=True, exist_ok=True)
    built = Path(tempfile.mkdtemp(prefix=repo.name + ".build-", dir=repo.parent))
    build_repo(built, commits)
    place_repo(built, repo, args.force)

    # Commits split three ways; every question about a commit stays in its split.
    order = list(range(len(commits)))
    rng.shuffle(order)
    n_test, n_val = args.test_commits, args.val_commits
    test_c = [commits[i] for i in order[:n_test]]
    val_c = [commits[i] for i in order[n_test:n_test + n_val]]
    train_c = [commits[i] for i in order[n_test + n_val:]]
    per_kind_train = args.train // len(KINDS)
    per_kind_demo = args.demos // len(KINDS)
    if per_kind_train + per_kind_demo > len(train_c):
        sys.exit("too few training commits for the training questions and demonstrations")

    def held_out(split: str, cs: list[dict]) -> list[dict]:
        pairs = [(k, c) for c in cs for k in KINDS]
        rng.shuffle(pairs)
        return [sample(split, i + 1, k, c) for i, (k, c) in enumerate(pairs)]

    test = held_out("test", test_c)
    val = held_out("val", val_c)
    # Per kind: training questions on some training commits, demonstrations on others.
    train_pairs, demo_pairs = [], []
    for k in KINDS:
        cs = rng.sample(train_c, len(train_c))
        train_pairs += [(k, c) for c in cs[:per_kind_train]]
        demo_pairs += [(k, c) for c in cs[per_kind_train:per_kind_train + per_kind_demo]]
    rng.shuffle(train_pairs)
    rng.shuffle(demo_pairs)
    train = [sample("train", i + 1, k, c) for i, (k, c) in enumerate(train_pairs)]

    # Real observations: every commit's, for the demonstrations, the checks and the sizes.
    shown = asyncio.run(show_all(server, repo, [c["short"] for c in commits]))
    errors = [rev for rev, (bad, _) in shown.items() if bad]
    if errors:
        sys.exit(f"git_show failed for {errors[:3]}: {shown[errors[0]][1]}")
    for c in commits:
        obs = shown[c["short"]][1]
        for k in KINDS:
            if question(k, c)[1] not in obs:
                sys.exit(f"the {k} of {c['short']} is not in its observation:\n{obs}")

    demos = []
    for i, (k, c) in enumerate(demo_pairs):
        q, a = question(k, c)
        messages = [
            {"role": "user", "content": q},
            {"role": "assistant", "content": hermes_call(
                "git_show", {"repo_path": ".", "revision": c["short"]})},
            {"role": "tool", "name": "git_show", "content": shown[c["short"]][1]},
            {"role": "assistant", "content": hermes_call("submit_answer", {"answer": a})},
        ]
        demos.append({"id": f"git-demo-{i + 1:03d}", "messages": messages, "answer": a,
                      "kind": k, "commit": c["short"]})

    # Disjointness: no held-out commit in training questions or demonstrations, no
    # training question repeated as a demonstration.
    held = {c["short"] for c in test_c} | {c["short"] for c in val_c}
    assert not held & {s["commit"] for s in train + demos}
    assert not {c["short"] for c in test_c} & {c["short"] for c in val_c}
    assert not {s["question"] for s in train} & {d["messages"][0]["content"] for d in demos}

    args.out.mkdir(parents=True, exist_ok=True)
    write_jsonl(args.out / "train.jsonl", train)
    write_jsonl(args.out / "val.jsonl", val)
    write_jsonl(args.out / "test.jsonl", test)
    write_jsonl(args.out / "demos.jsonl", demos)

    # The check: a few test questions asked of the server afresh.
    checked = test[:args.check]
    again = asyncio.run(show_all(server, repo, [s["commit"] for s in checked]))
    for s in checked:
        bad, obs = again[s["commit"]]
        ok = not bad and s["answer"] in obs
        print(f"check {s['id']} ({s['kind']}, {s['commit']}): answer {s['answer']!r} "
              f"{'found' if ok else 'MISSING'} in a {len(obs)}-character observation")
        if not ok:
            sys.exit(1)

    lengths = sorted(len(obs) for _, obs in shown.values())
    print(f"git_show observations of the {len(lengths)} commits, characters: min {lengths[0]}, "
          f"median {statistics.median(lengths):.0f}, mean {statistics.mean(lengths):.0f}, "
          f"max {lengths[-1]}")
    if repo != DEFAULT_REPO.absolute():
        print(f"note: git.toml's [[agent.mcp]] cwd names {DEFAULT_REPO}; set it to {repo}",
              file=sys.stderr)


if __name__ == "__main__":
    main()
