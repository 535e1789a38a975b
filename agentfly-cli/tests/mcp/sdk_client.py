"""The official MCP Python SDK as the client of `agentfly mcp-serve`: list, call, an error
flagged isError, and a stateful tool that keeps its state within one session and not across
two. Prints one JSON line of what it saw; the Rust test asserts on it.

Usage: sdk_client.py AGENTFLY_BINARY
"""
import asyncio
import json
import sys

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


def text(result):
    return "\n".join(c.text for c in result.content if getattr(c, "type", "") == "text")


async def session(binary, calls):
    params = StdioServerParameters(
        command=binary, args=["mcp-serve", "--tools", "calculator,code_interpreter"]
    )
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as s:
            await s.initialize()
            listed = await s.list_tools()
            seen = {"tools": {t.name: t.input_schema for t in listed.tools}, "calls": []}
            for name, args in calls:
                r = await s.call_tool(name, args)
                seen["calls"].append({"text": text(r), "is_error": bool(r.is_error)})
            return seen


async def main(binary):
    first = await session(binary, [
        ("calculator", {"expression": "6 * 7"}),
        ("calculator", {"expression": "1 / 0"}),
        ("code_interpreter", {"code": "x = 41"}),
        ("code_interpreter", {"code": "print(x + 1)"}),
    ])
    second = await session(binary, [("code_interpreter", {"code": "print(x + 1)"})])
    print(json.dumps({"first": first, "second": second}))


asyncio.run(main(sys.argv[1]))
