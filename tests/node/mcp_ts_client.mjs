// An MCP chat host as the official TypeScript SDK builds one, against graphrelay's /mcp.
//
// Driven by relay/tests/node_clients.rs. It starts with no token: the SDK's OAuth support
// (an `OAuthClientProvider` on the Streamable HTTP transport) discovers the servers, registers
// the client, and sends the owner to the authorization URL, where this script plays the owner
// over plain HTTP (sign-in form, then consent form) and hands the code to `finishAuth`. Then it
// does what a host does for its model: `listTools()` (the SDK caches each tool's output schema
// and checks every later result against it), `list_graph_sessions` with no arguments,
// `run_graph_session`, `get_graph_run` with `wait_seconds` until the run finished, each refusal
// the tools describe, and a cancel. Every answer is read from its text content, as a host that
// hands the model `content` does.
//
// The desktop is stopped half-way: the script prints `{"step":"stop-desktop"}` and waits for a
// line on stdin, so the run it cancels stays queued.
//
// Prints one JSON line (the report) last on stdout; exits 1 with `mcp_ts_client: error: ...` on
// stderr on any failure.
//
//   node mcp_ts_client.mjs --sdk DIR --base http://127.0.0.1:PORT --owner alice \
//       --password '...' --project ID --other-project ID --chat-link ID
import { createInterface } from "node:readline";
import { parseArgs } from "node:util";
import { pathToFileURL } from "node:url";

const CLIENT_NAME = "TypeScript SDK test";
const SCOPES = ["osfoundry:read", "osfoundry:run"];
const REDIRECT_URI = "http://127.0.0.1:9/callback";
// Far longer than a run of the test's graph takes once the desktop has it.
const WAIT_SECONDS = 30;
const MAX_WAITS = 6;

const { values: args } = parseArgs({
  options: {
    sdk: { type: "string" },
    base: { type: "string" },
    owner: { type: "string" },
    password: { type: "string" },
    project: { type: "string" },
    "other-project": { type: "string" },
    "chat-link": { type: "string" },
  },
});

const sdk = (path) =>
  import(pathToFileURL(`${args.sdk}/node_modules/@modelcontextprotocol/sdk/dist/esm/${path}`).href);
const { Client } = await sdk("client/index.js");
const { StreamableHTTPClientTransport } = await sdk("client/streamableHttp.js");
const { UnauthorizedError } = await sdk("client/auth.js");

class Failure extends Error {}

/** The value of each hidden input of the first form posting to `path`. */
function hiddenFields(html, path) {
  const form = html.match(new RegExp(`<form[^>]*action="[^"]*${path}"[^>]*>([\\s\\S]*?)</form>`));
  if (!form) throw new Failure(`no form posting to ${path} in: ${html.slice(0, 500)}`);
  const fields = [];
  for (const input of form[1].matchAll(/<input type="hidden" name="([^"]+)" value="([^"]*)"/g)) {
    fields.push([input[1], unescape(input[2])]);
  }
  return { action: form[0].match(/action="([^"]*)"/)[1], fields, body: form[1] };
}

function unescape(text) {
  return text
    .replaceAll("&quot;", '"')
    .replaceAll("&#39;", "'")
    .replaceAll("&lt;", "<")
    .replaceAll("&gt;", ">")
    .replaceAll("&amp;", "&");
}

/** The owner's part in a browser, over plain HTTP with the cookies kept by hand. */
class Owner {
  cookies = new Map();
  code = undefined;
  authorizations = 0;
  consentPointsToConsole = false;

  async request(url, form) {
    const headers = {};
    if (this.cookies.size) {
      headers.cookie = [...this.cookies].map(([k, v]) => `${k}=${v}`).join("; ");
    }
    let body;
    if (form) {
      headers["content-type"] = "application/x-www-form-urlencoded";
      body = new URLSearchParams(form).toString();
    }
    const response = await fetch(url, { method: form ? "POST" : "GET", headers, body, redirect: "manual" });
    for (const cookie of response.headers.getSetCookie()) {
      const [pair] = cookie.split(";");
      const at = pair.indexOf("=");
      this.cookies.set(pair.slice(0, at).trim(), pair.slice(at + 1).trim());
    }
    return { status: response.status, location: response.headers.get("location"), text: await response.text() };
  }

  async authorize(url) {
    this.authorizations += 1;
    let page = await this.request(url);
    if (page.text.includes("/oauth/sign-in")) {
      const form = hiddenFields(page.text, "/oauth/sign-in");
      const signedIn = await this.request(new URL(form.action, url), [
        ...form.fields,
        ["username", args.owner],
        ["password", args.password],
      ]);
      if (signedIn.status !== 303) throw new Failure(`sign-in: HTTP ${signedIn.status}: ${signedIn.text.slice(0, 300)}`);
      page = await this.request(new URL(signedIn.location, url));
    }
    if (page.status !== 200) throw new Failure(`the consent page: HTTP ${page.status}`);
    this.consentPointsToConsole = page.text.includes('href="/console"') && !page.text.includes("relay admin connection revoke");
    const form = hiddenFields(page.text, "/oauth/authorize");
    const allowed = await this.request(new URL(form.action, url), [
      ...form.fields,
      ["project", args.project],
      ...SCOPES.map((scope) => ["scope", scope]),
      ["decision", "allow"],
    ]);
    if (allowed.status !== 303) throw new Failure(`consent: HTTP ${allowed.status}: ${allowed.text.slice(0, 300)}`);
    const back = new URL(allowed.location);
    this.code = back.searchParams.get("code");
    if (!this.code) throw new Failure(`consent came back without a code: ${allowed.location}`);
  }
}

/** An in-memory `OAuthClientProvider` whose redirect plays the owner. */
function provider(owner) {
  const saved = { verifier: undefined, client: undefined, tokens: undefined };
  return {
    saved,
    get redirectUrl() {
      return REDIRECT_URI;
    },
    get clientMetadata() {
      return {
        client_name: CLIENT_NAME,
        redirect_uris: [REDIRECT_URI],
        grant_types: ["authorization_code", "refresh_token"],
        response_types: ["code"],
        token_endpoint_auth_method: "none",
        scope: SCOPES.join(" "),
      };
    },
    clientInformation: () => saved.client,
    saveClientInformation: (client) => {
      saved.client = client;
    },
    tokens: () => saved.tokens,
    saveTokens: (tokens) => {
      saved.tokens = tokens;
    },
    redirectToAuthorization: (url) => owner.authorize(url.href),
    saveCodeVerifier: (verifier) => {
      saved.verifier = verifier;
    },
    codeVerifier: () => saved.verifier,
  };
}

/** A connected client: the first connect is refused, the owner allows, the second succeeds. */
async function connect(owner) {
  const auth = provider(owner);
  const url = new URL(`${args.base}/mcp`);
  const client = () => new Client({ name: CLIENT_NAME, version: "1.0.0" });
  try {
    await client().connect(new StreamableHTTPClientTransport(url, { authProvider: auth }));
    throw new Failure("the server let a client without a token connect");
  } catch (error) {
    if (!(error instanceof UnauthorizedError)) throw error;
  }
  const transport = new StreamableHTTPClientTransport(url, { authProvider: auth });
  await transport.finishAuth(owner.code);
  const connected = client();
  await connected.connect(new StreamableHTTPClientTransport(url, { authProvider: auth }));
  return { client: connected, auth };
}

/** A tool call that must succeed: its text parsed as JSON, which must equal its structured content. */
async function answer(client, name, callArgs) {
  const result = await client.callTool({ name, arguments: callArgs });
  if (result.isError) throw new Failure(`${name} failed: ${JSON.stringify(result.content)}`);
  const text = result.content.find((block) => block.type === "text")?.text ?? "";
  const json = JSON.parse(text.split("\n")[0]);
  if (JSON.stringify(json) !== JSON.stringify(result.structuredContent)) {
    throw new Failure(`${name}: the text is not the structured content: ${text}`);
  }
  return { json, text };
}

/** A tool call that must be refused: what the host (and its model) sees. */
async function refusal(client, name, callArgs) {
  try {
    const result = await client.callTool({ name, arguments: callArgs });
    return {
      isError: result.isError === true,
      text: result.content.map((block) => block.text ?? "").join("\n"),
      structured: result.structuredContent ?? null,
    };
  } catch (error) {
    return { exception: String(error) };
  }
}

/** `get_graph_run` with `wait_seconds` until the run finished. */
async function waitForRun(client, commandId) {
  for (let i = 0; i < MAX_WAITS; i++) {
    const run = await answer(client, "get_graph_run", { command_id: commandId, wait_seconds: WAIT_SECONDS });
    if (["completed", "failed", "cancelled"].includes(run.json.status)) return { ...run, waits: i + 1 };
  }
  throw new Failure(`run ${commandId} did not finish after ${MAX_WAITS} waits`);
}

/** The first listed session once the desktop's sync has reached the service. */
async function firstSession(client) {
  for (let i = 0; i < 100; i++) {
    const listed = await answer(client, "list_graph_sessions", {});
    if (listed.json.sessions.length) return listed;
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
  throw new Failure("the desktop's session never appeared");
}

async function stopDesktop() {
  console.log(JSON.stringify({ step: "stop-desktop" }));
  const lines = createInterface({ input: process.stdin });
  for await (const line of lines) {
    if (line.trim() === "stopped") break;
  }
  lines.close();
}

async function run() {
  const owner = new Owner();
  const { client, auth } = await connect(owner);
  const tools = (await client.listTools()).tools;
  const listed = await firstSession(client);
  const session = listed.json.sessions[0].graph_session_id;
  const key = `ts-sdk-${Date.now()}`;
  const ticket = await answer(client, "run_graph_session", {
    graph_session_id: session,
    arguments: { word: "hello" },
    idempotency_key: key,
  });
  const commandId = ticket.json.command_id;
  const finished = await waitForRun(client, commandId);
  const unknownRun = "00000000-0000-4000-8000-000000000000";
  const refusals = {
    bad_arguments: await refusal(client, "run_graph_session", { graph_session_id: session, arguments: { word: 5 }, idempotency_key: `${key}-bad` }),
    unknown_argument: await refusal(client, "list_graph_sessions", { project: args.project }),
    unknown_session: await refusal(client, "run_graph_session", { graph_session_id: "no-such-session", arguments: {}, idempotency_key: `${key}-none` }),
    unknown_run: await refusal(client, "get_graph_run", { command_id: unknownRun }),
    malformed_id: await refusal(client, "get_graph_run", { command_id: "not-a-run-id" }),
    wrong_project: await refusal(client, "list_graph_sessions", { project_id: args["other-project"] }),
    unknown_chat_link: await refusal(client, "list_linked_chat_tasks", { chat_link_id: "00000000-0000-4000-8000-00000000000c" }),
    cancel_unknown_run: await refusal(client, "cancel_graph_run", { command_id: unknownRun }),
  };
  await stopDesktop();
  const second = await answer(client, "run_graph_session", {
    graph_session_id: session,
    arguments: { word: "never" },
    idempotency_key: `${key}-2`,
  });
  const cancelled = await answer(client, "cancel_graph_run", { command_id: second.json.command_id });
  const afterCancel = await answer(client, "get_graph_run", { command_id: second.json.command_id });
  const linked = await answer(client, "list_linked_chat_tasks", { chat_link_id: args["chat-link"] });
  await client.close();
  return {
    protocol_version: client.transport?.protocolVersion ?? null,
    tools: tools.map((tool) => tool.name),
    tools_with_output_schema: tools.filter((tool) => tool.outputSchema).length,
    instructions: client.getInstructions() ?? "",
    authorizations: owner.authorizations,
    consent_points_to_console: owner.consentPointsToConsole,
    granted_scope: auth.saved.tokens?.scope ?? null,
    listed: listed.json,
    ticket: ticket.json,
    ticket_text: ticket.text,
    finished: finished.json,
    finished_text: finished.text,
    waits: finished.waits,
    refusals,
    cancelled: cancelled.json,
    after_cancel: afterCancel.json,
    linked_tasks: linked.json,
  };
}

try {
  console.log(JSON.stringify(await run()));
  process.exit(0);
} catch (error) {
  console.error(error?.stack ?? error);
  console.error(`mcp_ts_client: error: ${error}`);
  process.exit(1);
}
