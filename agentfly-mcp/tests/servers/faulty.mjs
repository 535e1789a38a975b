// A deliberately faulty MCP server for agentfly's tests, on the official TypeScript SDK
// (installed into .mcp/ beside the reference servers). Tools: `echo` answers, `fail` answers
// with isError, `hang` never answers, `garbage` writes non-protocol bytes to stdout and never
// answers, `crash` exits the process. `--no-tools` lists none; `--bad-schema` lists a tool
// whose input schema is not an object.
import { createRequire } from "node:module";
import path from "node:path";

const root = process.env.AGENTFLY_MCP_NODE_MODULES;
const require = createRequire(path.join(root, "noop.js"));
const sdk = (p) => import(require.resolve(`@modelcontextprotocol/sdk/${p}`));
const { Server } = await sdk("server/index.js");
const { StdioServerTransport } = await sdk("server/stdio.js");
const { ListToolsRequestSchema, CallToolRequestSchema } = await sdk("types.js");

const args = process.argv.slice(2);
const object = (properties) => ({ type: "object", properties });
let tools = [
  { name: "echo", description: "Echoes `text`.", inputSchema: object({ text: { type: "string" } }) },
  { name: "fail", description: "Always fails.", inputSchema: object({}) },
  { name: "hang", description: "Never answers.", inputSchema: object({}) },
  { name: "garbage", description: "Writes garbage.", inputSchema: object({}) },
  { name: "crash", description: "Exits.", inputSchema: object({}) },
];
if (args.includes("--no-tools")) tools = [];
if (args.includes("--bad-schema")) {
  tools = [{ name: "listy", description: "A list schema.", inputSchema: { type: "array" } }];
}

const server = new Server({ name: "faulty", version: "1.0.0" }, { capabilities: { tools: {} } });
server.setRequestHandler(ListToolsRequestSchema, async () => ({ tools }));
server.setRequestHandler(CallToolRequestSchema, async (request) => {
  const name = request.params.name;
  const a = request.params.arguments ?? {};
  switch (name) {
    case "echo":
      return { content: [{ type: "text", text: `echo: ${a.text}` }] };
    case "fail":
      return { content: [{ type: "text", text: "this tool always fails" }], isError: true };
    case "hang":
      return new Promise(() => {});
    case "garbage":
      process.stdout.write("this is not JSON-RPC\n{\"neither\": \"is this\"}\n");
      return new Promise(() => {});
    case "crash":
      process.exit(3);
    default:
      throw new Error(`no tool ${name}`);
  }
});
await server.connect(new StdioServerTransport());
