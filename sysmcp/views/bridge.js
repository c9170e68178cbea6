// The view side of MCP Apps (io.modelcontextprotocol/ui, SEP-1865 of 2026-01-26): JSON-RPC 2.0 over
// postMessage with the host, written out here so the view needs no SDK, no bundler and no network.
// Everything that comes from the host or a tool result is data: it is only ever put into the page
// with textContent and CSSOM, never as markup.
"use strict";
const Bridge = (() => {
  const PROTOCOL_VERSION = "2026-01-26";
  const pending = new Map();
  const handlers = new Map();
  let nextId = 1;
  let context = {};
  const contextListeners = [];

  function post(message) {
    window.parent.postMessage(message, "*");
  }

  function request(method, params) {
    const id = nextId++;
    post({ jsonrpc: "2.0", id, method, params: params || {} });
    return new Promise((resolve, reject) => pending.set(id, { resolve, reject }));
  }

  function notify(method, params) {
    post({ jsonrpc: "2.0", method, params: params || {} });
  }

  function on(method, handler) {
    handlers.set(method, handler);
  }

  function answer(message) {
    // Requests from the host: teardown and ping need only an empty result; anything else is unknown.
    if (message.method === "ui/resource-teardown" || message.method === "ping") {
      post({ jsonrpc: "2.0", id: message.id, result: {} });
    } else {
      post({ jsonrpc: "2.0", id: message.id, error: { code: -32601, message: "Method not found: " + message.method } });
    }
  }

  window.addEventListener("message", (event) => {
    if (event.source !== window.parent) return; // only the host that embeds us speaks to us
    const message = event.data;
    if (!message || typeof message !== "object" || message.jsonrpc !== "2.0") return;
    if (typeof message.method !== "string") {
      const waiting = pending.get(message.id);
      if (!waiting) return;
      pending.delete(message.id);
      if (message.error) waiting.reject(new Error(String(message.error.message || "request failed")));
      else waiting.resolve(message.result || {});
      return;
    }
    if (message.id !== undefined && message.id !== null) {
      answer(message);
      return;
    }
    const handler = handlers.get(message.method);
    if (handler) handler(message.params || {});
  });

  function applyContext() {
    const root = document.documentElement;
    const theme = context.theme === "dark" || context.theme === "light" ? context.theme : null;
    if (theme) root.dataset.theme = theme;
    else delete root.dataset.theme;
    const variables = context.styles && context.styles.variables;
    if (variables && typeof variables === "object") {
      for (const [name, value] of Object.entries(variables)) {
        if (name.startsWith("--") && typeof value === "string") root.style.setProperty(name, value);
      }
    }
    const dims = context.containerDimensions || {};
    root.classList.toggle("fixed-height", typeof dims.height === "number");
    if (typeof dims.maxHeight === "number") root.style.maxHeight = dims.maxHeight + "px";
    for (const listener of contextListeners) listener(context);
  }

  on("ui/notifications/host-context-changed", (params) => {
    context = Object.assign({}, context, params);
    applyContext();
  });

  function reportSize(element) {
    let last = "";
    const send = () => {
      const width = Math.ceil(element.scrollWidth);
      const height = Math.ceil(element.scrollHeight);
      const key = width + "x" + height;
      if (key === last) return;
      last = key;
      notify("ui/notifications/size-changed", { width, height });
    };
    new ResizeObserver(send).observe(element);
    send();
  }

  /** ui/initialize, then ui/notifications/initialized; resolves with the host's answer. */
  async function start(name, sizeElement) {
    const result = await request("ui/initialize", {
      protocolVersion: PROTOCOL_VERSION,
      appInfo: { name, version: "@SYSMCP_VERSION@" },
      appCapabilities: { availableDisplayModes: ["inline"] },
    });
    context = result.hostContext || {};
    applyContext();
    notify("ui/notifications/initialized", {});
    if (sizeElement) reportSize(sizeElement);
    return result;
  }

  return {
    start,
    request,
    notify,
    on,
    onContext: (listener) => contextListeners.push(listener),
    get context() { return context; },
    callTool: (name, args) => request("tools/call", { name, arguments: args }),
  };
})();

// Shared helpers for every view.
const $ = (id) => document.getElementById(id);
/** The page's state banner: kind "error", "warn" or "" (none), and its text (empty: hidden). */
function setState(kind, text) {
  const box = $("state");
  box.className = "banner" + (kind ? " " + kind : "");
  box.textContent = text || "";
}
/** Starts a view that draws each tool result whole with render(structuredContent); the state banner
 * says when there is nothing to draw, when the call was cancelled, or that no host answered. */
function drawEachResult(name, render) {
  Bridge.on("ui/notifications/tool-result", (result) => {
    if (result.isError || !result.structuredContent) {
      setState("error", resultText(result) || "No structured content to draw.");
      return;
    }
    setState("", "");
    render(exactNames(result.structuredContent));
  });
  Bridge.on("ui/notifications/tool-cancelled", (params) => {
    setState("warn", "Cancelled" + (params.reason ? ": " + params.reason : "") + ".");
  });
  Bridge.start(name, $("app")).catch((error) => setState("error", "No host answered: " + error.message));
}
const UNITS = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
function humanBytes(value) {
  let n = Number(value) || 0;
  const negative = n < 0;
  n = Math.abs(n);
  let unit = 0;
  while (n >= 1024 && unit < UNITS.length - 1) {
    n /= 1024;
    unit++;
  }
  const text = unit === 0 ? String(Math.round(n)) : n.toFixed(n < 10 ? 2 : n < 100 ? 1 : 0);
  return (negative ? "-" : "") + text + " " + UNITS[unit];
}
function count(value) {
  return (Number(value) || 0).toLocaleString("en-US");
}
function percent(part, whole) {
  if (!whole) return "0 %";
  const share = (100 * part) / whole;
  return (share >= 10 ? share.toFixed(0) : share.toFixed(1)) + " %";
}
function duration(seconds) {
  let s = Math.round(Number(seconds));
  if (!isFinite(s) || s < 0) return "";
  const parts = [];
  for (const [size, unit] of [[86400, "d"], [3600, "h"], [60, "min"]]) {
    if (s >= size) {
      parts.push(Math.floor(s / size) + " " + unit);
      s %= size;
    }
    if (parts.length === 2) break;
  }
  if (!parts.length) parts.push(s + " s");
  return parts.join(" ");
}
// What Python's str.isprintable() calls unprintable (the text answers escape the same characters).
const UNPRINTABLE = /[\p{Cc}\p{Cf}\p{Cs}\p{Co}\p{Cn}\p{Zl}\p{Zp}]|(?! )\p{Zs}/gu;
const C_ESCAPES = { "\n": "\\n", "\r": "\\r", "\t": "\\t", "\x07": "\\a", "\b": "\\b", "\v": "\\v", "\f": "\\f" };
/** A file's name (a path, a mount point, a device node) as the page shows it, as the text answers show
 * it (GNU ls -b): its own backslash doubled, then each character that is not printable escaped as
 * shownWords escapes it, so the name holding ESC (a\033b) and the one literally named so (a\\033b)
 * never read alike. Attributes that are data, not text (data-path, which a click sends back), keep the
 * exact name. */
function shownName(name) {
  return shownWords(String(name).replace(/\\/g, "\\\\"));
}
/** Words that are not a file's name (an engine's message, a model, a kernel line) as the page shows
 * them: each character that is not printable written as the text answers write it (newline as \n, ESC
 * as \033, U+202E as \342\200\256), so words nobody here chose can neither reorder the text around
 * them (a bidi override) nor start a line of their own in a tooltip, nor hide in a zero-width
 * character; a backslash stays as it is. */
function shownWords(text) {
  return String(text).replace(UNPRINTABLE, (char) => C_ESCAPES[char] || (isByte(char) ? octal(char.charCodeAt(0) - 0xdc00) :
    Array.from(new TextEncoder().encode(char), octal).join("")));
}
const octal = (byte) => "\\" + byte.toString(8).padStart(3, "0");
/** A byte that is not UTF-8, as exactNames (and Python's os.fsdecode) hold it: U+DC80..U+DCFF. */
const isByte = (char) => char.length === 1 && char.charCodeAt(0) >= 0xdc80 && char.charCodeAt(0) <= 0xdcff;
/** Structured content with each string its exact_bytes lists (JSON Pointer → base64) given back as the
 * name itself, each byte that is not UTF-8 as U+DC80..U+DCFF (as Python's os.fsdecode), and exact_bytes
 * left out. Without it a name that is not UTF-8 is only its shown form (backslashes doubled, \xNN),
 * which shownName would escape again and a click would send back as another name; undone, the page
 * shows it as the text answers do, and a call's JSON carries each such byte as \udcNN, which the
 * server reads as the byte. An entry whose pointer leads to no string, or that is not base64, is
 * passed over. */
function exactNames(structured) {
  const marks = structured && structured.exact_bytes;
  if (!marks || typeof marks !== "object") return structured;
  const data = structuredClone(structured);
  delete data.exact_bytes;
  const has = (value, key) => value !== null && typeof value === "object" && Object.hasOwn(value, key);
  for (const [pointer, encoded] of Object.entries(marks)) {
    if (!pointer.startsWith("/") || typeof encoded !== "string") continue;
    const tokens = pointer.slice(1).split("/").map((t) => t.replace(/~1/g, "/").replace(/~0/g, "~"));
    const last = tokens.pop();
    let here = data;
    for (const token of tokens) here = has(here, token) ? here[token] : undefined;
    if (!has(here, last) || typeof here[last] !== "string") continue;
    let bytes;
    try { bytes = Uint8Array.from(atob(encoded), (c) => c.charCodeAt(0)); } catch { continue; }
    here[last] = fsdecode(bytes);
  }
  return data;
}
/** Bytes as Python's os.fsdecode reads them: UTF-8, each byte no UTF-8 sequence holds as U+DC00 + it. */
function fsdecode(bytes) {
  let out = "";
  for (let i = 0; i < bytes.length;) {
    const [length, point] = utf8At(bytes, i);
    out += length ? String.fromCodePoint(point) : String.fromCharCode(0xdc00 + bytes[i]);
    i += length || 1;
  }
  return out;
}
/** The length and code point of the UTF-8 sequence at bytes[i], or [0] when none starts there (as
 * Python's decoder: no overlong form, no surrogate, nothing past U+10FFFF). */
function utf8At(bytes, i) {
  const b0 = bytes[i];
  if (b0 < 0x80) return [1, b0];
  const [length, low, high] = b0 >= 0xc2 && b0 <= 0xdf ? [2, 0x80, 0xbf] : b0 === 0xe0 ? [3, 0xa0, 0xbf] :
    b0 === 0xed ? [3, 0x80, 0x9f] : b0 >= 0xe1 && b0 <= 0xef ? [3, 0x80, 0xbf] : b0 === 0xf0 ? [4, 0x90, 0xbf] :
    b0 >= 0xf1 && b0 <= 0xf3 ? [4, 0x80, 0xbf] : b0 === 0xf4 ? [4, 0x80, 0x8f] : [0, 0, 0];
  if (!length || i + length > bytes.length || bytes[i + 1] < low || bytes[i + 1] > high) return [0];
  let point = b0 & (0xff >> (length + 1));
  for (let k = 1; k < length; k++) {
    if (k > 1 && (bytes[i + k] & 0xc0) !== 0x80) return [0];
    point = (point << 6) | (bytes[i + k] & 0x3f);
  }
  return [length, point];
}
/** An element with attributes and children (strings become text nodes, never markup). */
function h(tag, attributes, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attributes || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") node.className = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}
function resultText(result) {
  const blocks = (result && result.content) || [];
  return blocks.filter((b) => b && b.type === "text").map((b) => b.text).join("\n");
}
