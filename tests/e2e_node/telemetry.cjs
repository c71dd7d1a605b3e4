// The agent's OpenTelemetry set-up, loaded before anything else with
// `node --require ./telemetry.cjs agent_service.cjs` — the register file an
// SRE adds to a Node.js service. Everything else comes from the standard
// `OTEL_*` environment variables that `@opentelemetry/sdk-node` reads
// (service name, OTLP/HTTP protobuf exporter and its endpoint, compression,
// batch delay, `OTEL_NODE_DISABLED_INSTRUMENTATIONS`).
//
// Two things cannot be said with environment variables and are said here:
// which headers the HTTP instrumentations capture (the request id nginx
// sets, and the model server's `X-LLM-Reason` / `X-LLM-Duration`), and,
// for the `openinference` variant, Arize's OpenInference instrumentation of
// the official `openai` client. The `vercel-ai` variant needs nothing more:
// the AI SDK writes its spans through the global tracer provider when a call
// sets `experimental_telemetry`.
"use strict";

const { NodeSDK } = require("@opentelemetry/sdk-node");
const { getNodeAutoInstrumentations } = require("@opentelemetry/auto-instrumentations-node");

const RESPONSE_HEADERS = ["x-llm-reason", "x-llm-duration"];
const instrumentations = [
  getNodeAutoInstrumentations({
    "@opentelemetry/instrumentation-http": {
      headersToSpanAttributes: {
        server: { requestHeaders: ["x-request-id", "x-max-wait"] },
        client: { responseHeaders: RESPONSE_HEADERS },
      },
    },
    "@opentelemetry/instrumentation-undici": {
      headersToSpanAttributes: { responseHeaders: RESPONSE_HEADERS },
    },
  }),
];
if (process.env.AGENT_LLM_SDK === "openinference") {
  const { OpenAIInstrumentation } = require("@arizeai/openinference-instrumentation-openai");
  instrumentations.push(new OpenAIInstrumentation());
}

const sdk = new NodeSDK({ instrumentations });
sdk.start();

// Flush what is buffered when the harness stops the service.
let stopping = false;
for (const sig of ["SIGINT", "SIGTERM"]) {
  process.once(sig, () => {
    if (stopping) return;
    stopping = true;
    const done = () => process.exit(0);
    setTimeout(done, 5000).unref();
    sdk.shutdown().then(done, done);
  });
}
