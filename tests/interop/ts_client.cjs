// Drive sysmcp with the official TypeScript SDK client: @modelcontextprotocol/sdk 1.x or
// @modelcontextprotocol/client 2.x. Run by tests/interop/test_ts_sdk.py as
//   node ts_client.cjs PLAN.json
// The plan names the SDK ("v1" or "v2"), its install prefix, the version negotiation mode (v2), the
// server command, the arguments for every tool and a big file to cancel a hash of. The script prints
// one JSON report on stdout. It requires the SDK from its prefix, so it needs no package.json here.
"use strict";

const fs = require("node:fs");
const path = require("node:path");
const { createRequire } = require("node:module");

function load(plan) {
  const from = createRequire(path.join(plan.prefix, "node_modules", "resolve-from-here.js"));
  if (plan.sdk === "v1") {
    return {
      Client: from("@modelcontextprotocol/sdk/client/index.js").Client,
      StdioClientTransport: from("@modelcontextprotocol/sdk/client/stdio.js").StdioClientTransport,
    };
  }
  return {
    Client: from("@modelcontextprotocol/client").Client,
    StdioClientTransport: from("@modelcontextprotocol/client/stdio").StdioClientTransport,
  };
}

// 1.x: callTool(params, resultSchema, options); 2.x: callTool(params, options).
function call(client, plan, params, options) {
  return plan.sdk === "v1" ? client.callTool(params, undefined, options) : client.callTool(params, options);
}

async function main() {
  const plan = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
  const { Client, StdioClientTransport } = load(plan);
  const transport = new StdioClientTransport({
    command: plan.command[0],
    args: plan.command.slice(1),
    cwd: plan.cwd,
    stderr: "ignore",
  });
  const options = plan.sdk === "v2" ? { versionNegotiation: { mode: plan.mode } } : {};
  const client = new Client({ name: `sysmcp-tests-${plan.sdk}`, version: "0" }, options);
  await client.connect(transport);
  const report = { calls: {} };
  report.protocolVersion =
    typeof client.getNegotiatedProtocolVersion === "function"
      ? client.getNegotiatedProtocolVersion()
      : transport.protocolVersion;
  report.serverName = (client.getServerVersion() || {}).name;
  report.capabilities = Object.keys(client.getServerCapabilities() || {});

  const listed = (await client.listTools()).tools;
  report.tools = listed.map((tool) => tool.name);
  for (const [name, args] of Object.entries(plan.tools)) {
    const progress = [];
    const result = await call(client, plan, { name, arguments: args }, {
      onprogress: (p) => progress.push(p.progress),
      timeout: 30000,
    });
    report.calls[name] = {
      isError: result.isError === true,
      structured: result.structuredContent !== undefined,
      progress,
      text: (result.content || []).filter((b) => b.type === "text").map((b) => b.text).slice(0, 1),
    };
  }

  // Cancel a long hash at its first progress notification: the SDK sends notifications/cancelled,
  // the call rejects, and the server keeps serving.
  const controller = new AbortController();
  const started = Date.now();
  let firstProgress = null;
  const cancel = { progressBeforeAbort: 0 };
  try {
    await call(client, plan, { name: "file_sha256", arguments: { path: plan.bigFile } }, {
      signal: controller.signal,
      timeout: 60000,
      onprogress: (p) => {
        cancel.progressBeforeAbort += 1;
        if (firstProgress === null) {
          firstProgress = p.progress;
          controller.abort("enough");
        }
      },
    });
    cancel.rejected = false;
  } catch (error) {
    cancel.rejected = true;
    cancel.error = String(error && error.message ? error.message : error).slice(0, 200);
  }
  cancel.seconds = (Date.now() - started) / 1000;
  const after = await call(client, plan, { name: "file_sha256", arguments: plan.tools.file_sha256 }, {});
  cancel.servingAfter = after.isError !== true;
  report.cancel = cancel;
  await client.close();
  process.stdout.write(JSON.stringify(report) + "\n");
}

main().catch((error) => {
  process.stderr.write(String(error && error.stack ? error.stack : error) + "\n");
  process.exit(1);
});
