// A small MCP Apps host for the view tests: a page built on the official ext-apps AppBridge (bundled
// from npm by the test), each view in a sandboxed iframe under the spec's default CSP, a real sysmcp
// process behind it, headless Chromium driven by playwright-core. Prints one JSON report on stdout.
//
//   node host_driver.mjs CONFIG.json
//
// CONFIG: {prefix, chromium, bridge, userDataDir, artefacts, server: [argv...], tree}
import { spawn } from "node:child_process";
import { createRequire } from "node:module";
import { readFileSync, mkdirSync } from "node:fs";
import path from "node:path";

const config = JSON.parse(readFileSync(process.argv[2], "utf8"));
const require = createRequire(path.join(config.prefix, "noop.js"));
const { chromium } = require("playwright-core");

const ORIGIN = "http://sysmcp-host.test";
const EXTENSION = { "io.modelcontextprotocol/ui": { mimeTypes: ["text/html;profile=mcp-app"] } };
// SEP-1865's restrictive default, what a host applies to a resource that declares no domains.
const DEFAULT_CSP = "default-src 'none'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; " +
  "img-src 'self' data:; media-src 'self' data:; connect-src 'none'; frame-src 'none'; object-src 'none'; base-uri 'self'";

// -- a minimal MCP client over the server's stdio -----------------------------------------------
class Server {
  constructor(argv) {
    this.child = spawn(argv[0], argv.slice(1), { stdio: ["pipe", "pipe", "inherit"] });
    this.pending = new Map();
    this.nextId = 1;
    let buffer = "";
    this.child.stdout.setEncoding("utf8");
    this.child.stdout.on("data", (chunk) => {
      buffer += chunk;
      let cut;
      while ((cut = buffer.indexOf("\n")) >= 0) {
        const line = buffer.slice(0, cut);
        buffer = buffer.slice(cut + 1);
        const message = JSON.parse(line);
        const waiting = this.pending.get(message.id);
        if (waiting && !("method" in message)) {
          this.pending.delete(message.id);
          if (message.error) waiting.reject(new Error(JSON.stringify(message.error)));
          else waiting.resolve(message.result);
        }
      }
    });
  }
  request(method, params) {
    const id = this.nextId++;
    this.child.stdin.write(JSON.stringify({ jsonrpc: "2.0", id, method, params }) + "\n");
    return new Promise((resolve, reject) => this.pending.set(id, { resolve, reject }));
  }
  notify(method) {
    this.child.stdin.write(JSON.stringify({ jsonrpc: "2.0", method }) + "\n");
  }
  close() {
    this.child.stdin.end();
  }
}

const HOST_PAGE = `<!DOCTYPE html><html><head><meta charset="utf-8"><title>test host</title>
<style>body{margin:0;background:#888}iframe{border:0;display:block}</style></head><body>
<script type="module">
import { AppBridge, PostMessageTransport } from "/bridge.js";
window.startView = async ({ html, csp, toolArgs, toolResult, theme, width }) => {
  const iframe = document.createElement("iframe");
  iframe.setAttribute("sandbox", "allow-scripts");
  iframe.style.width = width + "px";
  iframe.style.height = "200px";
  document.body.replaceChildren(iframe);
  const bridge = new AppBridge(null, { name: "sysmcp-test-host", version: "1.0.0" },
    { serverTools: {}, logging: {} },
    { hostContext: { theme, platform: "web", displayMode: "inline", containerDimensions: { width, maxHeight: 4000 } } });
  window.viewCalls = [];
  window.viewLogs = [];
  bridge.oncalltool = async (params) => {
    window.viewCalls.push(params);
    return await window.hostCallTool(params);
  };
  bridge.onloggingmessage = (params) => window.viewLogs.push(params);
  bridge.onsizechange = ({ height }) => { if (height) iframe.style.height = height + "px"; };
  const initialized = new Promise((resolve) => { bridge.oninitialized = resolve; });
  await bridge.connect(new PostMessageTransport(iframe.contentWindow, iframe.contentWindow));
  const meta = '<meta http-equiv="Content-Security-Policy" content="' + csp + '">';
  iframe.srcdoc = html.replace(/<head>/i, "<head>" + meta);
  await initialized;
  await bridge.sendToolInput({ arguments: toolArgs });
  await bridge.sendToolResult(toolResult);
  window.bridge = bridge;
  window.hostTheme = theme;
  return { app: bridge.getAppVersion(), capabilities: bridge.getAppCapabilities() };
};
window.setTheme = (theme) => {
  window.bridge.setHostContext({ theme, platform: "web", displayMode: "inline", containerDimensions: { width: 400, maxHeight: 4000 } });
};
</script></body></html>`;

async function main() {
  const report = { requests: [], blocked: [], console: [], scenarios: {} };
  const server = new Server(config.server);
  const init = await server.request("initialize", {
    protocolVersion: "2025-11-25",
    capabilities: { extensions: EXTENSION },
    clientInfo: { name: "sysmcp-view-tests", version: "0" },
  });
  server.notify("notifications/initialized");
  report.initialize = init;
  report.tools = (await server.request("tools/list", {})).tools;
  const read = async (uri) => (await server.request("resources/read", { uri })).contents[0];
  const dirView = await read("ui://sysmcp/dir-usage");
  const disksView = await read("ui://sysmcp/disks");

  mkdirSync(config.artefacts, { recursive: true });
  const context = await chromium.launchPersistentContext(config.userDataDir, {
    executablePath: config.chromium,
    headless: true,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
      "--disable-component-update", "--disable-sync", "--no-first-run"],
    viewport: { width: 900, height: 1200 },
  });
  const page = context.pages()[0] || (await context.newPage());
  const bridgeJs = readFileSync(config.bridge, "utf8");
  await context.route("**/*", (route) => {
    const url = route.request().url();
    if (url === ORIGIN + "/") return route.fulfill({ contentType: "text/html", body: HOST_PAGE });
    if (url === ORIGIN + "/bridge.js") return route.fulfill({ contentType: "text/javascript", body: bridgeJs });
    report.blocked.push(url);
    return route.abort();
  });
  page.on("request", (request) => {
    const frame = request.frame();
    report.requests.push({ url: request.url(), fromHostPage: frame === page.mainFrame() });
  });
  page.on("console", (message) => report.console.push({ type: message.type(), text: message.text() }));
  page.on("pageerror", (error) => report.console.push({ type: "pageerror", text: String(error) }));
  await page.exposeFunction("hostCallTool", (params) => server.request("tools/call", params));
  await page.goto(ORIGIN + "/");

  let current = null;
  const viewFrame = () => current;
  const shot = async (name) => {
    const file = path.join(config.artefacts, name + ".png");
    await page.locator("iframe").screenshot({ path: file });
    return file;
  };
  const start = async (view, args, result, theme = "light", width = 400) => {
    const info = await page.evaluate((options) => window.startView(options),
      { html: view.text, csp: DEFAULT_CSP, toolArgs: args, toolResult: result, theme, width });
    current = await (await page.$("iframe")).contentFrame();
    return info;
  };
  const waitTheme = async (theme) => {
    await page.evaluate((t) => window.setTheme(t), theme);
    await viewFrame().waitForFunction((t) => document.documentElement.dataset.theme === t, theme);
  };
  const cells = () => viewFrame().$$eval("#map .cell", (nodes) => nodes.map((node) => {
    const box = node.getBoundingClientRect();
    return { kind: node.dataset.kind, path: node.dataset.path || null, label: node.querySelector(".name").textContent,
      nested: node.classList.contains("nested"), x: box.x, y: box.y, w: box.width, h: box.height, tag: node.tagName };
  }));
  const mapBox = () => viewFrame().$eval("#map", (node) => {
    const box = node.getBoundingClientRect();
    return { w: box.width, h: box.height };
  });

  // 1. dir_usage: the treemap, both themes, a click and a key press that call the tool again.
  const dirArgs = { path: config.tree, top_n: 4 };
  const dirResult = await server.request("tools/call", { name: "dir_usage", arguments: dirArgs });
  const dir = { result: dirResult };
  dir.handshake = await start(dirView, dirArgs, dirResult);
  await viewFrame().waitForSelector("#map .cell");
  dir.cells = await cells();
  dir.map = await mapBox();
  dir.crumbs = await viewFrame().$$eval("#crumbs button", (nodes) => nodes.map((n) => n.textContent));
  dir.notes = await viewFrame().$$eval("#notes [data-note]", (nodes) => nodes.map((n) => n.dataset.note));
  dir.theme = await viewFrame().evaluate(() => document.documentElement.dataset.theme);
  dir.background = await viewFrame().evaluate(() => getComputedStyle(document.body).backgroundColor);
  await viewFrame().hover("#map .cell.dir", { position: { x: 6, y: 6 } });
  dir.details = await viewFrame().$eval("#details", (node) => node.textContent);
  dir.shots = [await shot("dir-usage-light-400")];
  await waitTheme("dark");
  dir.darkBackground = await viewFrame().evaluate(() => getComputedStyle(document.body).backgroundColor);
  dir.shots.push(await shot("dir-usage-dark-400"));
  await waitTheme("light");
  const target = dir.cells.find((cell) => cell.kind === "dir");
  await viewFrame().click(`#map .cell.dir[data-path="${target.path}"]`, { position: { x: 6, y: 6 } });
  await page.waitForFunction(() => window.viewCalls.length === 1);
  await viewFrame().waitForFunction((p) => {
    const current = document.querySelector("#crumbs [aria-current]");
    return current && current.dataset.path === p && !document.querySelector("#map[aria-busy]");
  }, target.path);
  dir.clicked = target.path;
  dir.afterClick = { calls: await page.evaluate(() => window.viewCalls), cells: await cells() };
  dir.shots.push(await shot("dir-usage-drilled-light-400"));
  // Keyboard: Backspace goes back up (another dir_usage call), Enter on a focused directory drills.
  await viewFrame().press("body", "Backspace");
  await page.waitForFunction(() => window.viewCalls.length === 2);
  await viewFrame().waitForFunction((p) => document.querySelector("#crumbs [aria-current]")?.dataset.path === p, config.tree);
  await viewFrame().focus(`#map .cell.dir[data-path="${target.path}"]`);
  await viewFrame().press(`#map .cell.dir[data-path="${target.path}"]`, "Enter");
  await page.waitForFunction(() => window.viewCalls.length === 3);
  dir.keyboardCalls = await page.evaluate(() => window.viewCalls);
  // A partial result is shown as such.
  const partial = structuredClone(dirResult);
  partial.structuredContent.complete = false;
  partial.structuredContent.stopped_reason = "time budget of 0.5 s used up";
  await start(dirView, dirArgs, partial, "dark");
  await viewFrame().waitForSelector("#notes [data-note=partial]");
  dir.partialNote = await viewFrame().$eval("#notes [data-note=partial]", (node) => node.textContent);
  dir.summaryPartial = await viewFrame().$eval("#summary", (node) => node.textContent);
  dir.shots.push(await shot("dir-usage-partial-dark-400"));
  report.scenarios.dir = dir;

  // 2. disk_usage: one bar per filesystem, both themes; then a fleet-shaped result.
  const disksResult = await server.request("tools/call", { name: "disk_usage", arguments: {} });
  const disks = { result: disksResult };
  disks.handshake = await start(disksView, {}, disksResult);
  await viewFrame().waitForSelector("li.fs");
  const readBars = () => viewFrame().$$eval("li.fs", (items) => items.map((item) => ({
    mount: item.dataset.mount,
    host: item.closest("section").dataset.host,
    bars: [...item.querySelectorAll("[role=meter]")].map((m) => ({ kind: m.dataset.kind, value: Number(m.getAttribute("aria-valuenow")),
      fill: m.querySelector(".fill").getBoundingClientRect().width / m.getBoundingClientRect().width,
      line: (m.querySelector(".line").getBoundingClientRect().x + 1 - m.getBoundingClientRect().x) / m.getBoundingClientRect().width })),
    rate: item.querySelector("[data-rate]")?.textContent ?? null,
    problem: item.querySelector(".problem")?.textContent ?? null,
  })));
  disks.items = await readBars();
  disks.shots = [await shot("disks-light-400")];
  await waitTheme("dark");
  disks.shots.push(await shot("disks-dark-400"));
  const fleet = structuredClone(disksResult.structuredContent);
  const rich = structuredClone(fleet);
  // Given out of order: the view puts the fullest (by space or inodes) first.
  const first = rich.filesystems[0];
  rich.filesystems = [
    { ...first, mount_point: "/home", percent_used: 41 },
    { ...first, percent_used: 93, alerts: ["space"], rate: { seconds: 3, samples: 4, fill_rate_bytes_per_s: 15 * 1048576, seconds_to_full: 11400, inode_fill_rate_per_s: 0, seconds_to_inodes_full: null } },
    { ...first, mount_point: "/var", percent_used: 60, alerts: ["inodes"],
      inodes: { ...(first.inodes || { total: 1000, used: 0, free: 1000 }), percent_used: 97 } },
  ];
  const fleetContent = {
    hosts: [
      { host: "web1", status: "ok", seconds: 0.21, result: rich },
      { host: "web2", status: "ok", seconds: 0.34, result: fleet },
      { host: "db1", status: "unreachable", seconds: 5.0, reason: "ssh: connect to host db1 port 22: Connection refused" },
    ],
  };
  await start(disksView, { hosts: ["all"] }, { content: [{ type: "text", text: "fleet" }], structuredContent: fleetContent }, "light", 640);
  await viewFrame().waitForSelector("section.host[data-host=db1]");
  disks.fleet = await readBars();
  disks.fleetHosts = await viewFrame().$$eval("section.host", (nodes) => nodes.map((n) => n.dataset.host));
  disks.fleetProblem = await viewFrame().$eval("section.host[data-host=db1]", (node) => node.textContent);
  disks.shots.push(await shot("disks-fleet-light-640"));
  report.scenarios.disks = disks;

  // 3. container_usage: the data root as one stacked bar (a result shaped as the tool gives it: the
  // view tests start no container engine).
  const containersView = await read("ui://sysmcp/containers");
  const usage = {
    engine: "Docker 28.2.2", socket: "/run/docker.sock", data_root: "/var/lib/docker", storage_driver: "overlay2", log_driver: "json-file",
    images: { count: 12, layer_bytes: 4e9, layer_bytes_estimated: false, dangling: 3, dangling_unique_bytes: 6e8, largest: [] },
    containers: { count: 9, running: 4, writable_bytes: 1e9, stopped_writable_bytes: 7e8, largest: [] },
    volumes: { count: 5, bytes: 2e9, dangling: 2, dangling_bytes: 5e8, largest: [] },
    build_cache: { records: 40, bytes: 1e9, in_use_bytes: 0 },
    logs: { count: 9, bytes: 1.5e9, without_limit: 8, largest: [] },
    reconciliation: { walked_bytes: 1e10, walked_disk_bytes: 1.01e10, accounted_bytes: 9.5e9, difference_bytes: 5e8, complete: true, parts: [], skipped: {} },
    note: null,
  };
  const containers = {};
  containers.handshake = await start(containersView, {}, { content: [{ type: "text", text: "containers" }], structuredContent: usage });
  await viewFrame().waitForSelector(".stack .seg");
  containers.segments = await viewFrame().$$eval(".stack .seg", (nodes) => nodes.map((node) => ({ kind: node.dataset.kind,
    share: node.getBoundingClientRect().width / node.parentElement.getBoundingClientRect().width })));
  containers.rows = await viewFrame().$$eval("#parts li", (nodes) => nodes.map((node) => ({ kind: node.dataset.kind, text: node.textContent })));
  containers.summary = await viewFrame().$eval("#summary", (node) => node.textContent);
  containers.shots = [await shot("containers-light-400")];
  await waitTheme("dark");
  containers.shots.push(await shot("containers-dark-400"));
  // The state banner the views share (bridge.js): an error result, then a cancelled call.
  const banner = async (send, params) => {
    const before = await viewFrame().$eval("#state", (node) => node.className);
    await page.evaluate(([name, p]) => window.bridge[name](p), [send, params]);
    await viewFrame().waitForFunction((old) => document.getElementById("state").className !== old, before);
    return await viewFrame().$eval("#state", (node) => ({ kind: node.className, text: node.textContent }));
  };
  containers.error = await banner("sendToolResult", { isError: true, content: [{ type: "text", text: "no engine answered" }] });
  containers.cancelled = await banner("sendToolCancelled", { reason: "the user stopped it" });
  // A partial answer (/system/df not answered in time: the engine's lists only), its data root walked
  // where a symlink leads.
  const partialUsage = {
    ...usage,
    partial: "the engine did not give its sizes within 10 s (GET /system/df, which measures every layer)",
    images: { ...usage.images, layer_bytes: 0, dangling_unique_bytes: 0 },
    containers: { ...usage.containers, writable_bytes: 0, stopped_writable_bytes: 0, stopped: 5, not_measured: 9, stopped_not_measured: 5 },
    volumes: { ...usage.volumes, bytes: 0, dangling_bytes: 0, not_measured: 5, dangling_not_measured: 2 },
    build_cache: { records: 0, bytes: 0, in_use_bytes: 0 },
    // Podman's inspects (one per container) past their time budget: no log file found to count.
    logs: { count: 0, bytes: 0, without_limit: 0, not_inspected: 12, largest: [] },
    reconciliation: { ...usage.reconciliation, path: "/srv/docker", accounted_bytes: 1.5e9, difference_bytes: 8.5e9, not_measured: 15 },
  };
  await page.evaluate((p) => window.bridge.sendToolResult(p), { content: [{ type: "text", text: "partial" }], structuredContent: partialUsage });
  await viewFrame().waitForSelector("[data-note=partial]");
  containers.partial = {
    note: await viewFrame().$eval("[data-note=partial]", (node) => ({ kind: node.className, text: node.textContent })),
    rows: await viewFrame().$$eval("#parts li", (nodes) => nodes.map((node) => ({ kind: node.dataset.kind, text: node.textContent }))),
    summary: await viewFrame().$eval("#summary", (node) => node.textContent),
  };
  containers.shots.push(await shot("containers-partial-dark-400"));
  // A hostile engine's words (a rootless engine says anything): markup, an override that reverses text.
  const hostileUsage = { ...usage, engine: "Docker \u202e<img src=x onerror=\"window.pwned=1\">", data_root: "/srv/<b>d</b>",
    images: { ...usage.images, not_measured: 2 }, logs: { ...usage.logs, not_the_engines: 1 }, repeated: 3 };
  await page.evaluate((p) => window.bridge.sendToolResult(p), { content: [{ type: "text", text: "hostile" }], structuredContent: hostileUsage });
  await viewFrame().waitForFunction(() => document.getElementById("summary").textContent.includes("/srv/<b>d</b>"));
  containers.hostile = {
    summary: await viewFrame().$eval("#summary", (node) => node.textContent),
    markup: await viewFrame().$$eval("#summary *:not(bdi)", (nodes) => nodes.map((node) => node.tagName)),
    isolated: await viewFrame().$$eval("#summary bdi", (nodes) => nodes.map((node) => node.textContent)),
    pwned: await viewFrame().evaluate(() => Boolean(window.pwned)),
    rows: await viewFrame().$$eval("#parts li", (nodes) => nodes.map((node) => ({ kind: node.dataset.kind, text: node.textContent }))),
    repeated: await viewFrame().$eval("[data-note=repeated]", (node) => node.textContent).catch(() => null),
  };
  report.scenarios.containers = containers;

  // 4. disk_health: one row per device, md array and btrfs device (results the test computed from
  // recorded smartctl documents and /proc/mdstat: a failing ATA disk, a healthy NVMe drive, a degraded
  // raid1; then a raid1 rebuilding).
  const healthView = await read("ui://sysmcp/health");
  const healthRows = () => viewFrame().$$eval("#rows > li", (nodes) => nodes.map((node) => {
    const badge = node.querySelector(".badge");
    const bar = node.querySelector(".bar .fill");
    return { kind: node.dataset.kind, name: node.dataset.name, verdict: badge.textContent, badgeColor: getComputedStyle(badge).color,
      text: node.textContent, progress: bar ? bar.getBoundingClientRect().width / bar.parentElement.getBoundingClientRect().width : null };
  }));
  const health = {};
  health.handshake = await start(healthView, {}, { content: [{ type: "text", text: "health" }], structuredContent: config.health });
  await viewFrame().waitForSelector("#rows > li");
  health.rows = await healthRows();
  health.summary = await viewFrame().$eval("#summary", (node) => node.textContent);
  health.notes = await viewFrame().$$eval("#notes li", (nodes) => nodes.map((n) => n.textContent));
  health.colors = await viewFrame().evaluate(() => ["--color-text-danger", "--color-text-warning"].map((name) => {
    const probe = document.body.appendChild(document.createElement("span"));
    probe.style.color = "var(" + name + ")";
    const color = getComputedStyle(probe).color;
    probe.remove();
    return color;
  }));
  health.shots = [await shot("health-light-400")];
  await waitTheme("dark");
  health.shots.push(await shot("health-dark-400"));
  await waitTheme("light");
  await page.evaluate((r) => window.bridge.sendToolResult(r), { content: [{ type: "text", text: "health" }], structuredContent: config.healthRebuilding });
  await viewFrame().waitForSelector("#rows > li[data-kind=array] .bar");
  health.rebuilding = await healthRows();
  report.scenarios.health = health;

  // 5. Names nobody here chose, as a tool result carries them (exact, in JSON): markup, a bidi override,
  // a newline that would start a line of its own, a zero-width space, in each view's name fields.
  const evil = config.hostile;
  const hostile = {};
  const seen = () => viewFrame().evaluate(() => ({
    markup: document.querySelectorAll("img, svg, iframe, object, embed").length,
    pwned: window.pwned === true,
    text: document.getElementById("app").innerText,
    titles: [...document.querySelectorAll("[title]")].map((n) => n.getAttribute("title")),
    labels: [...document.querySelectorAll("[aria-label]")].map((n) => n.getAttribute("aria-label")),
    dataPaths: [...document.querySelectorAll("[data-path]")].map((n) => n.dataset.path),
  }));
  const hostileDir = structuredClone(dirResult);
  const sc = hostileDir.structuredContent;
  const renamed = (path) => evil.names.reduce((p, name, i) => p.replace("/" + ["alpha", "beta", "gamma", "delta"][i], "/" + name), path);
  for (const entry of [...sc.largest_directories, ...sc.largest_files]) entry.path = renamed(entry.path);
  sc.path = sc.path + "/" + evil.names[0];
  for (const entry of [...sc.largest_directories, ...sc.largest_files]) entry.path = entry.path.replace(config.tree + "/", sc.path + "/");
  await start(dirView, { path: sc.path }, hostileDir);
  await viewFrame().waitForSelector("#map .cell");
  await viewFrame().hover("#map .cell.dir", { position: { x: 6, y: 6 } });
  hostile.dir = await seen();
  hostile.shots = [await shot("hostile-names-dir-usage-400")];
  hostile.dir.crumbs = await viewFrame().$$eval("#crumbs button", (nodes) => nodes.map((n) => n.textContent));
  // A name that is not UTF-8 as a tool result carries it: shown as \xNN with its backslashes doubled,
  // its exact bytes in the result's exact_bytes; beside it, a UTF-8 name that shows the same.
  const oddDir = structuredClone(dirResult);
  const odd = oddDir.structuredContent;
  odd.exact_bytes = {};
  const tops = odd.largest_directories.flatMap((d, i) => (d.depth === 1 ? [i] : []));  // the map's own cells
  config.exact.forEach((name, k) => {
    odd.largest_directories[tops[k]].path = odd.path + "/" + name.shown;
    const parent = unescape(encodeURIComponent(odd.path + "/"));  // its UTF-8 bytes, one character each
    if (name.exact) odd.exact_bytes["/largest_directories/" + tops[k] + "/path"] = btoa(parent + atob(name.exact));
  });
  await start(dirView, { path: odd.path }, oddDir);
  await viewFrame().waitForSelector("#map .cell");
  hostile.exact = await seen();

  const hostileDisks = structuredClone(disksResult.structuredContent);
  hostileDisks.filesystems = hostileDisks.filesystems.slice(0, 1).map((fs) => ({ ...fs, mount_point: evil.names[2], device: evil.names[1] }));
  await start(disksView, {}, { content: [{ type: "text", text: "disks" }], structuredContent: hostileDisks });
  await viewFrame().waitForSelector("li.fs");
  hostile.disks = await seen();
  hostile.shots.push(await shot("hostile-names-disks-400"));
  hostile.disks.mounts = await viewFrame().$$eval("li.fs", (nodes) => nodes.map((n) => n.dataset.mount));
  const hostileHealth = structuredClone(config.health);
  hostileHealth.devices = hostileHealth.devices.map((d) => ({ ...d, device: evil.names[3], model: evil.names[1] }));
  await start(healthView, {}, { content: [{ type: "text", text: "health" }], structuredContent: hostileHealth });
  await viewFrame().waitForSelector("#rows > li");
  hostile.health = await seen();
  hostile.shots.push(await shot("hostile-names-health-400"));
  const hostileContainers = { ...usage, engine: "Docker " + evil.names[1], socket: evil.names[3], data_root: evil.names[2],
    reconciliation: { ...usage.reconciliation, path: evil.names[0] }, note: "walked " + evil.names[2] };
  await start(containersView, {}, { content: [{ type: "text", text: "containers" }], structuredContent: hostileContainers });
  await viewFrame().waitForFunction(() => document.getElementById("summary").textContent.includes("walked at"));
  hostile.containers = await seen();
  hostile.containers.isolated = await viewFrame().$$eval("#summary bdi", (nodes) => nodes.map((node) => node.textContent));
  hostile.shots.push(await shot("hostile-names-containers-400"));
  report.scenarios.hostile = hostile;

  await context.close();
  server.close();
  process.stdout.write(JSON.stringify(report));
}

main().catch((error) => {
  process.stderr.write(String(error && error.stack || error) + "\n");
  process.exit(1);
});
