// A tiny scripted ACP agent for the adapter's tests: it declares the
// session capabilities in $PEER_DECLARE (JSON, default {}), answers each
// session request with the session it stands for, asks one permission
// (tool kind $PEER_TOOL_KIND) during a prompt, reports a cumulative cost
// before and after the prompt, and replies with the method that opened the
// session. With PEER_HANG set it never ends a prompt, and writes the
// session/cancel it hears to $PEER_LOG. With PEER_STORE set it keeps a
// session store there, as a real agent keeps its saved sessions: a new
// session is saved in it (a failed save is said on stderr, and the prompt
// goes on), and a session not found there cannot be loaded or resumed.
const fs = require("fs");
const readline = require("readline");
const declare = JSON.parse(process.env.PEER_DECLARE || "{}");
const log = (line) => process.env.PEER_LOG && fs.appendFileSync(process.env.PEER_LOG, line + "\n");
const send = (message) => process.stdout.write(JSON.stringify({ jsonrpc: "2.0", ...message }) + "\n");
const store = process.env.PEER_STORE;
const saved = (sessionId) => `${store}/${sessionId}.json`;
const save = (sessionId) => {
  try {
    fs.mkdirSync(store, { recursive: true });
    fs.writeFileSync(saved(sessionId), JSON.stringify({ sessionId }) + "\n");
  } catch (error) {
    process.stderr.write(`peer: cannot save session ${sessionId}: ${error.message}\n`);
  }
};
const update = (sessionId, update) => send({ method: "session/update", params: { sessionId, update } });
let opened = "none";
let pending = null;
let nextId = 1000;
readline.createInterface({ input: process.stdin }).on("line", (line) => {
  const message = JSON.parse(line);
  const { id, method, params } = message;
  if (method) log(method);
  if (method === "initialize") {
    send({ id, result: { protocolVersion: 1, agentCapabilities: declare, agentInfo: { name: "peer", version: "1.0" } } });
  } else if (method === "session/new") {
    opened = "new";
    if (store) save("s-new");
    send({ id, result: { sessionId: "s-new" } });
  } else if ((method === "session/load" || method === "session/resume") && store && !fs.existsSync(saved(params.sessionId))) {
    send({ id, error: { code: -32002, message: `Resource not found: session ${params.sessionId} is not in ${store}` } });
  } else if (method === "session/load" || method === "session/resume") {
    opened = method;
    update(params.sessionId, { sessionUpdate: "agent_message_chunk", content: { type: "text", text: "replayed history " } });
    update(params.sessionId, { sessionUpdate: "usage_update", used: 1, size: 10, cost: { amount: 0.25, currency: "USD" } });
    send({ id, result: {} });
  } else if (method === "session/fork") {
    opened = "session/fork of " + params.sessionId;
    send({ id, result: { sessionId: "s-fork" } });
  } else if (method === "session/prompt") {
    const sessionId = params.sessionId;
    if (process.env.PEER_HANG) {
      pending = id;
      return;
    }
    const ask = nextId++;
    pending = { id, sessionId };
    send({
      id: ask,
      method: "session/request_permission",
      params: {
        sessionId,
        toolCall: { toolCallId: "call-1", kind: process.env.PEER_TOOL_KIND || "edit", title: "Writing to a.txt" },
        options: [
          { optionId: "yes", name: "Allow", kind: "allow_once" },
          { optionId: "no", name: "Reject", kind: "reject_once" },
        ],
      },
    });
  } else if (method === "session/cancel") {
    if (pending !== null) send({ id: pending, result: { stopReason: "cancelled" } });
  } else if (id !== undefined && message.result) {
    // The permission's answer: say it, report the cost, end the turn.
    const { sessionId } = pending;
    const answer = message.result.outcome.optionId || message.result.outcome.outcome;
    update(sessionId, { sessionUpdate: "agent_message_chunk", content: { type: "text", text: `opened by ${opened}; permission ${answer}` } });
    update(sessionId, { sessionUpdate: "usage_update", used: 2, size: 10, cost: { amount: 0.375, currency: "USD" } });
    send({ id: pending.id, result: { stopReason: "end_turn" } });
  }
});
