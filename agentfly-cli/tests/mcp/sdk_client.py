"""The official MCP Python SDK as the client of `agentfly mcp-serve`: list, call, an error
flagged isError, and a stateful tool that keeps its state within one session and not across
two. Prints one JSON line of what it saw; the Rust test asserts on it.

Usage: sdk_client.py AGENTFLY_BINARY [stdio|http]

Over stdio each session is a process the SDK starts. Over HTTP one `agentfly mcp-serve
--http 127.0.0.1:0` serves both sessions (its URL read from its stderr), and is stopped
with SIGTERM at the end; its exit status is reported as "exit".
"""
import asyncio
import json
import re
import signal
import subprocess
import sys

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

TOOLS = "calculator,code_interpreter"


def text(result):
    return "\n".join(c.text for c in result.content if getattr(c, "type", "") == "text")


async def run_session(read, write, calls):
    async with ClientSession(read, write) as s:
        await s.initialize()
        listed = await s.list_tools()
        seen = {"tools": {t.name: t.input_schema for t in listed.tools}, "calls": []}
        for name, args in calls:
            r = await s.call_tool(name, args)
            seen["calls"].append({"text": text(r), "is_error": bool(r.is_error)})
        return seen


def stdio_session(binary):
    async def session(calls):
        params = StdioServerParameters(command=binary, args=["mcp-serve", "--tools", TOOLS])
        async with stdio_client(params) as (read, write):
            return await run_session(read, write, calls)

    return session


def http_session(url):
    async def session(calls):
        async with streamable_http_client(url) as (read, write):
            return await run_session(read, write, calls)

    return session


async def sessions(session):
    first = await session([
        ("calculator", {"expression": "6 * 7"}),
        ("calculator", {"expression": "1 / 0"}),
        ("code_interpreter", {"code": "x = 41"}),
        ("code_interpreter", {"code": "print(x + 1)"}),
    ])
    second = await session([("code_interpreter", {"code": "print(x + 1)"})])
    return {"first": first, "second": second}


def main(binary, transport):
    if transport == "stdio":
        print(json.dumps(asyncio.run(sessions(stdio_session(binary)))))
        return
    server = subprocess.Popen(
        [binary, "mcp-serve", "--tools", TOOLS, "--http", "127.0.0.1:0"],
        stderr=subprocess.PIPE, text=True,
    )
    try:
        url = None
        for line in server.stderr:
            sys.stderr.write(line)
            found = re.search(r"(http://\S+/mcp)", line)
            if found:
                url = found.group(1)
                break
        if url is None:
            sys.exit(f"agentfly mcp-serve --http printed no URL (exit {server.wait()})")
        seen = asyncio.run(sessions(http_session(url)))
        server.send_signal(signal.SIGTERM)
        seen["exit"] = server.wait(timeout=30)
        sys.stderr.write(server.stderr.read())
        print(json.dumps(seen))
    finally:
        if server.poll() is None:
            server.kill()


main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "stdio")
