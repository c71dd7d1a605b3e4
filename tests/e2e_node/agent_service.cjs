// The agent service in Node.js: express, an LLM SDK for its models, `fetch`
// (undici) and axios for its tools. It is tests/e2e_otel/agent_service.py's
// twin: the same routes, the same request plans, the same answers.
//
// It carries no tracing set-up of its own: run.py starts it as
// `node --require ./telemetry.cjs agent_service.cjs` (sdk-node with the
// auto-instrumentations, configured by `OTEL_*` variables). What a developer
// writes in code is what their LLM SDK asks for, per variant
// (`AGENT_LLM_SDK`):
// - `genai`: the official `openai` client, instrumented by the
//   auto-instrumentations' own `@opentelemetry/instrumentation-openai`
//   (GenAI conventions), its own timeouts and retries; tools are plain
//   `fetch` / axios calls (only their HTTP spans name them); the judge runs
//   in an application span `answer_judge`;
// - `openinference`: the official `openai` client (instrumented by
//   @arizeai/openinference-instrumentation-openai in telemetry.cjs, the
//   auto-instrumentations' own told off with
//   `OTEL_NODE_DISABLED_INSTRUMENTATIONS=openai`: both wrapping `create` read
//   the response body twice), its own timeouts and retries; tools wrapped in OpenInference's `traceTool`, the
//   judge in `traceEvaluator` (@arizeai/openinference-core);
// - `vercel-ai`: the Vercel AI SDK (`ai` with `@ai-sdk/openai`'s chat model)
//   with `experimental_telemetry` on every call (`functionId: answer_judge`
//   for the judge), the service retrying a timed-out call itself; tools in
//   an application span named `tool.<name>` with no attributes.
//
// A request body is a plan: {"steps": [...], "budget_s": 4.0}; steps are
// llm, judge, tool, parallel, pause (tests/e2e_otel/scenarios.py). A budget
// makes the service answer 503 when it runs out, whether or not the client
// is still there.
"use strict";

const fs = require("node:fs");
const express = require("express");
const axios = require("axios");
const { trace, SpanStatusCode } = require("@opentelemetry/api");

const VARIANT = process.env.AGENT_LLM_SDK || "openinference";
const MODEL_URL = process.env.AGENT_MODEL_URL; // http://127.0.0.1:PORT/v1
const LEGACY_MODEL_URL = process.env.AGENT_LEGACY_MODEL_URL || MODEL_URL;
const TOOLS = JSON.parse(process.env.AGENT_TOOLS || "{}"); // name -> base url
const JUDGE_MODEL = process.env.AGENT_JUDGE_MODEL || "qwen2.5-72b-instruct";
const WORKERS = Number(process.env.AGENT_REPORT_WORKERS || "2");
// The service's own answer log (what it answered, per X-Request-ID): the
// test's ground truth for what the client could not see once nginx had cut.
const ANSWER_LOG = process.env.AGENT_ANSWER_LOG;
const PORT = Number(process.env.PORT || "8080");

// A timeout signal inside AbortSignal.any() may be garbage-collected before
// it fires (nodejs/node#57736): the attempt then never times out. Each one
// is held here until its attempt ends.
const timers = new Set();
function held(t) {
  timers.add(t);
  return t;
}
function release(t) {
  if (t) timers.delete(t);
}

class Timeout extends Error {
  constructor(what) {
    super(`${what} timed out`);
    this.name = "DependencyTimeout";
  }
}

function prompt(words) {
  const n = Math.max(1, Math.floor(words || 40));
  return Array.from({ length: n }, (_, i) => `w${i % 97}`).join(" ");
}

function isTimeout(e) {
  return (
    e instanceof Timeout ||
    e?.name === "TimeoutError" ||
    e?.constructor?.name === "APIConnectionTimeoutError" || // openai's
    e?.code === "ECONNABORTED" ||
    e?.code === "ETIMEDOUT" ||
    e?.cause?.name === "TimeoutError"
  );
}

// ---------------------------------------------------------------------------
// The two LLM SDKs

function openaiSdk(oi) {
  const OpenAI = require("openai");
  const core = oi && require("@arizeai/openinference-core");
  const clients = {
    main: new OpenAI({ baseURL: MODEL_URL, apiKey: "sk-local", maxRetries: 0 }),
    legacy: new OpenAI({ baseURL: LEGACY_MODEL_URL, apiKey: "sk-local", maxRetries: 0 }),
  };
  return {
    async llm(step, relay, signal) {
      const client = clients[step.server || "main"];
      const body = {
        model: step.model,
        messages: [{ role: "user", content: prompt(step.prompt_words) }],
        max_tokens: step.max_tokens || 64,
      };
      const opts = {
        timeout: (step.timeout || 30) * 1000,
        maxRetries: step.retries || 0,
        headers: { "X-Sim": JSON.stringify(step.sim || {}) },
        signal,
      };
      if (step.stream) {
        const stream = await client.chat.completions.create(
          { ...body, stream: true, stream_options: { include_usage: true } },
          opts,
        );
        for await (const chunk of stream) {
          const text = chunk.choices?.[0]?.delta?.content;
          if (relay && text) relay.put(text);
        }
        return;
      }
      const r = await client.chat.completions.create(body, opts);
      if (relay) relay.put(r.choices[0].message.content);
    },
    tool(name, fn) {
      return oi ? core.traceTool(fn, { name })() : fn();
    },
    judge(name, fn) {
      return oi ? core.traceEvaluator(fn, { name })() : appSpan(name, fn);
    },
  };
}

// An application span around a step, as a developer writes one with the
// OpenTelemetry API: the name only, an error recorded when it throws.
function appSpan(name, fn) {
  return trace.getTracer("agent-api").startActiveSpan(name, async (span) => {
    try {
      return await fn();
    } catch (e) {
      span.recordException(e);
      span.setStatus({ code: SpanStatusCode.ERROR, message: String(e.message || e) });
      throw e;
    } finally {
      span.end();
    }
  });
}

function vercelAiSdk() {
  const { generateText, streamText } = require("ai");
  const { createOpenAI } = require("@ai-sdk/openai");
  const providers = {
    main: createOpenAI({ baseURL: MODEL_URL, apiKey: "sk-local" }),
    legacy: createOpenAI({ baseURL: LEGACY_MODEL_URL, apiKey: "sk-local" }),
  };
  async function once(step, relay, signal) {
    const timer = step.timeout ? held(AbortSignal.timeout(step.timeout * 1000)) : null;
    const attempt = timer ? AbortSignal.any([signal, timer]) : signal;
    const call = {
      model: providers[step.server || "main"].chat(step.model),
      prompt: prompt(step.prompt_words),
      maxOutputTokens: step.max_tokens || 64,
      maxRetries: 0,
      abortSignal: attempt,
      headers: { "X-Sim": JSON.stringify(step.sim || {}) },
      experimental_telemetry: { isEnabled: true, functionId: step.function_id },
    };
    try {
      if (step.stream) {
        const r = streamText(call);
        for await (const part of r.fullStream) {
          if (part.type === "text-delta" && relay && part.text) relay.put(part.text);
          if (part.type === "error") throw part.error;
        }
        return;
      }
      const r = await generateText(call);
      if (relay) relay.put(r.text);
    } catch (e) {
      if (attempt !== signal && attempt.aborted && !signal.aborted) throw new Timeout(`model ${step.model}`);
      throw e;
    } finally {
      release(timer);
    }
  }

  return {
    // The AI SDK retries only answers it deems retryable, never an aborted
    // call: the service retries a timed-out call itself, as its authors
    // would.
    async llm(step, relay, signal) {
      const attempts = 1 + (step.retries || 0);
      for (let a = 1; ; a++) {
        try {
          return await once(step, relay, signal);
        } catch (e) {
          if (a >= attempts || !(e instanceof Timeout)) throw e;
        }
      }
    },
    tool(name, fn) {
      return appSpan(`tool.${name}`, fn);
    },
    judge(name, fn) {
      return fn(name);
    },
  };
}

const SDKS = { genai: () => openaiSdk(false), openinference: () => openaiSdk(true), "vercel-ai": vercelAiSdk };
const sdk = SDKS[VARIANT]?.();
if (!sdk) {
  console.error(`unknown AGENT_LLM_SDK ${VARIANT}`);
  process.exit(2);
}

// ---------------------------------------------------------------------------
// Tools: fetch (undici) by default, axios where the plan says `requests`
// (the Python twin's second client).

async function toolCall(step, signal) {
  const base = TOOLS[step.name];
  const qs = new URLSearchParams({ latency_s: String(step.latency_s ?? 0.05), status: String(step.status ?? 200) });
  const url = `${base}/run?${qs}`;
  const ms = step.timeout ? step.timeout * 1000 : undefined;
  if (step.client === "requests") {
    try {
      const r = await axios.get(url, { timeout: ms, signal });
      return r.data;
    } catch (e) {
      if (isTimeout(e)) throw new Timeout(`tool ${step.name}`);
      throw e;
    }
  }
  const timer = ms ? held(AbortSignal.timeout(ms)) : null;
  const sig = timer ? AbortSignal.any([signal, timer]) : signal;
  let r;
  try {
    r = await fetch(url, { signal: sig });
  } catch (e) {
    if (isTimeout(e)) throw new Timeout(`tool ${step.name}`);
    throw e;
  } finally {
    release(timer);
  }
  if (!r.ok) throw new Error(`tool ${step.name} answered ${r.status}`);
  return r.json();
}

async function toolStep(step, signal) {
  const attempts = step.attempts || 1;
  for (let a = 1; ; a++) {
    try {
      return await sdk.tool(step.name, () => toolCall(step, signal));
    } catch (e) {
      if (signal.aborted) throw e;
      if (a >= attempts) {
        if (step.fallback) return runSteps([step.fallback], null, signal);
        throw e;
      }
    }
  }
}

async function runSteps(steps, relay, signal) {
  for (const step of steps) {
    if (signal.aborted) throw signal.reason;
    switch (step.op) {
      case "llm":
        await sdk.llm(step, relay, signal);
        break;
      case "judge": {
        const name = step.name || "answer_judge";
        await sdk.judge(name, () =>
          sdk.llm({ ...step, model: step.model || JUDGE_MODEL, function_id: name }, null, signal),
        );
        break;
      }
      case "tool":
        await toolStep(step, signal);
        break;
      case "parallel":
        await Promise.all(step.steps.map((s) => runSteps([s], null, signal)));
        break;
      case "pause":
        await new Promise((ok) => setTimeout(ok, step.s * 1000));
        break;
      default:
        throw new Error(`unknown step ${step.op}`);
    }
  }
}

// ---------------------------------------------------------------------------
// The routes

function planOf(req) {
  const p = req.body;
  return p && typeof p === "object" && Array.isArray(p.steps) ? p : null;
}

// `span_sees`: whether the status set now can still reach the server span.
// @opentelemetry/instrumentation-http ends that span on the response's
// 'close' and reads `statusCode` then: a status set before 'close' fires is
// in it (also when the client has already hung up, a race of a millisecond
// when the service's budget and nginx's read timeout end together), one
// set after is not.
function logAnswer(req, status, spanSees) {
  if (!ANSWER_LOG) return;
  const line = JSON.stringify({ request_id: req.get("x-request-id") || null, status, span_sees: spanSees, t: Date.now() / 1000 });
  fs.appendFileSync(ANSWER_LOG, line + "\n");
}

class Pool {
  constructor(n) {
    this.free = n;
    this.waiting = [];
  }
  async run(fn) {
    if (this.free > 0) this.free--;
    else await new Promise((ok) => this.waiting.push(ok));
    try {
      return await fn();
    } finally {
      const next = this.waiting.shift();
      if (next) next();
      else this.free++;
    }
  }
}

async function answer(req, res, plan) {
  // Registered after the instrumentation's own listener, so both run in the
  // same 'close' emit: false here means the span has not ended yet.
  let closed = false;
  res.on("close", () => {
    closed = true;
  });
  const ctl = new AbortController();
  let timer;
  let status;
  let body;
  try {
    const work = runSteps(plan.steps, null, ctl.signal);
    if (plan.budget_s) {
      const budget = new Promise((_, no) => {
        timer = setTimeout(() => no(new Error("budget")), plan.budget_s * 1000);
      });
      await Promise.race([work, budget]);
    } else {
      await work;
    }
    status = 200;
    body = { answer: "done" };
  } catch (e) {
    if (e?.message === "budget") {
      ctl.abort(new Error("the request's time budget ran out"));
      status = 503;
      body = { error: "the request's time budget ran out" };
    } else if (isTimeout(e)) {
      status = 503;
      body = { error: `a dependency timed out: ${e.name}` };
    } else {
      status = 502;
      body = { error: `${e?.name}: ${e?.message}` };
      console.error(`${req.path} answered 502: ${e?.stack || e}`, e?.cause);
    }
  } finally {
    clearTimeout(timer);
  }
  const writes = !res.headersSent && !res.writableEnded;
  logAnswer(req, status, writes && !closed);
  if (writes) res.status(status).json(body);
}

const app = express();
app.use(express.json({ limit: "1mb" }));
const workers = new Pool(WORKERS);
const badPlan = { error: 'body must be {"steps": [...]}' };

app.post("/v1/agent/run", async (req, res) => {
  const plan = planOf(req);
  if (!plan) return res.status(400).json(badPlan);
  await answer(req, res, plan);
});

// Report jobs share a small pool of workers: a request waits for one before
// any work begins.
app.post("/v1/agent/report", async (req, res) => {
  const plan = planOf(req);
  if (!plan) return res.status(400).json(badPlan);
  await workers.run(() => answer(req, res, plan));
});

app.post("/v1/agent/stream", async (req, res) => {
  const plan = planOf(req);
  if (!plan) return res.status(400).json(badPlan);
  logAnswer(req, 200, true);
  const ctl = new AbortController();
  res.on("close", () => {
    if (!res.writableFinished) ctl.abort(new Error("the client went away"));
  });
  res.writeHead(200, { "Content-Type": "text/event-stream", "Cache-Control": "no-cache" });
  res.flushHeaders();
  const queue = [];
  let wake = null;
  const relay = {
    put(item) {
      queue.push(item);
      if (wake) wake();
    },
  };
  const work = runSteps(plan.steps, relay, ctl.signal)
    .catch(() => {})
    .finally(() => relay.put(null));
  const hb = plan.heartbeat_s ? plan.heartbeat_s * 1000 : null;
  try {
    for (;;) {
      if (!queue.length) {
        await new Promise((ok) => {
          wake = ok;
          if (hb) setTimeout(ok, hb);
        });
        wake = null;
      }
      if (ctl.signal.aborted) break;
      if (!queue.length) {
        res.write(": heartbeat\n\n");
        continue;
      }
      const item = queue.shift();
      if (item === null) {
        res.write("data: [DONE]\n\n");
        break;
      }
      res.write(`data: ${JSON.stringify({ delta: item })}\n\n`);
    }
  } finally {
    res.end();
    ctl.abort(new Error("the answer ended"));
    await work;
  }
});

app.get("/healthz", (req, res) => res.json({ ok: true }));

// The harness binds the socket and hands it over (AGENT_LISTEN_FD), so no
// port is found free and let go; PORT is for running the agent by hand.
const LISTEN_FD = process.env.AGENT_LISTEN_FD;
if (LISTEN_FD) {
  app.listen({ fd: Number(LISTEN_FD) }, () => console.log(`agent-api (${VARIANT}) on fd ${LISTEN_FD}`));
} else {
  app.listen(PORT, "127.0.0.1", () => console.log(`agent-api (${VARIANT}) on 127.0.0.1:${PORT}`));
}
