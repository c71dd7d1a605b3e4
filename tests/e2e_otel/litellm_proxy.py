"""The real LiteLLM proxy (PyPI `litellm[proxy]`, pinned in
requirements-litellm.txt, its own venv) between the agent and the model
server, for run.py's `litellm` variant.

Configured as an SRE configures it — a config.yaml and environment
variables, no code: one model group per scenario model, each deployment's
own `timeout` and `num_retries`, a fallback group, `forward_client_headers_to_llm_api`
(so the test's `X-Sim` reaches the model server), a master key (it
refuses to start without one; the agent sends it), and LiteLLM's
OpenTelemetry callback (`callbacks: ["otel"]`) exporting OTLP/HTTP
protobuf to the harness's receiver. The app runs under uvicorn on a
socket bound here and handed over (`--fd`): no port is picked for it.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REQUIREMENTS = os.path.join(HERE, "requirements-litellm.txt")
VERSION = "1.106.12"  # never 1.107.0 (a compromised release)


def config(model_url, groups, fallbacks, master_key):
    """config.yaml as JSON (YAML's superset). `groups`: model name →
    {timeout, num_retries}; `fallbacks`: model → [models]."""
    return {
        "model_list": [
            {"model_name": name, "litellm_params": {"model": f"openai/{name}", "api_base": model_url, "api_key": "sk-local", **params}}
            for name, params in groups.items()
        ],
        # No cooldown: a deployment that timed out keeps being tried (with
        # cooldowns LiteLLM answers 429 "no deployments available" at once).
        "router_settings": {"fallbacks": [{k: v} for k, v in fallbacks.items()], "disable_cooldowns": True},
        # No prompts in the spans (what an SRE sets for privacy; also less
        # work per call), no spend logs (there is no database).
        "litellm_settings": {"callbacks": ["otel"], "drop_params": True, "turn_off_message_logging": True},
        "general_settings": {"forward_client_headers_to_llm_api": True, "master_key": master_key, "disable_spend_logs": True},
    }


class LiteLLMProxy:
    def __init__(self, venv, workdir, model_url, groups, fallbacks, otlp_endpoint, service_name="litellm-proxy"):
        self.dir = workdir
        self.groups = groups
        cfg = os.path.join(workdir, "litellm_config.yaml")
        # LiteLLM refuses to start without a master key; the agent uses it.
        self.key = "sk-" + secrets.token_hex(24)
        with open(cfg, "w") as f:
            json.dump(config(model_url, groups, fallbacks, self.key), f, indent=1)
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sock.listen(511)
        self.port = sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/v1"
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "LITELLM_", "AGENT_"))}
        env.update({
            "CONFIG_FILE_PATH": cfg,
            "OTEL_EXPORTER": "otlp_http",
            "OTEL_ENDPOINT": otlp_endpoint,
            "OTEL_SERVICE_NAME": service_name,
            "OTEL_BSP_SCHEDULE_DELAY": "300",
            "LITELLM_LOG": "ERROR",
            "LITELLM_TELEMETRY": "False",
            "DISABLE_SCHEMA_UPDATE": "True",
        })
        self.log_path = os.path.join(workdir, "litellm.log")
        out = open(self.log_path, "w")
        bindir = os.path.join(venv, "bin")
        self.proc = subprocess.Popen(
            [os.path.join(bindir, "python"), "-m", "uvicorn", "litellm.proxy.proxy_server:app", "--fd", str(sock.fileno()),
             "--no-access-log", "--timeout-graceful-shutdown", "3"],
            cwd=workdir, env=env, stdout=out, stderr=subprocess.STDOUT, pass_fds=[sock.fileno()],
        )
        sock.close()
        end = time.monotonic() + 120
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise RuntimeError(f"LiteLLM exited; see {self.log_path}")
            with open(self.log_path) as f:
                text = f.read()
            if "Application startup complete" in text:
                self.warm_up()
                return
            if "Application startup failed" in text:
                self.stop()
                raise RuntimeError(f"LiteLLM refused to start; see {self.log_path}")
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"LiteLLM did not start within 120 s; see {self.log_path}")

    def warm_up(self):
        """One chat completion before the scenarios: LiteLLM imports its
        completion path on the first call (seconds on a busy machine)."""
        import http.client

        model = next(iter(self.groups))
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        try:
            conn.request("POST", "/v1/chat/completions",
                         json.dumps({"model": model, "messages": [{"role": "user", "content": "warm up"}], "max_tokens": 1}),
                         {"Content-Type": "application/json", "Authorization": f"Bearer {self.key}"})
            conn.getresponse().read()
        finally:
            conn.close()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(2)  # SIGINT: uvicorn shuts down, the SDK flushes its spans
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
