"""A stateful MCP server over streamable HTTP, written with the official Python SDK: each
MCP session (its Mcp-Session-Id) keeps its own notes. For agentfly's client over HTTP.

Usage: http_notes.py PORT
"""
import sys

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("notes")
notes_of = {}


def session_of(ctx: Context) -> str:
    return (ctx.headers or {}).get("mcp-session-id", "")


@server.tool()
def note(text: str, ctx: Context) -> str:
    """Keeps a note for this session."""
    notes_of.setdefault(session_of(ctx), []).append(text)
    return f"noted ({len(notes_of[session_of(ctx)])})"


@server.tool()
def notes(ctx: Context) -> str:
    """This session's notes, one per line."""
    return "\n".join(notes_of.get(session_of(ctx), [])) or "no notes"


@server.tool()
def fail(reason: str) -> str:
    """Fails with the reason (a ToolError: the SDK passes its message on, while any other
    exception reaches the client only as `Error executing tool fail`)."""
    raise ToolError(reason)


server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[1]))
