//! The formats overtime knows by name (`overtime nginx-format --list`).

/// nginx's built-in `combined` format (always `escape=default`).
pub const COMBINED_BODY: &str = "'$remote_addr - $remote_user [$time_local] \"$request\" $status $body_bytes_sent \"$http_referer\" \"$http_user_agent\"'";

/// The `log_format overtime …;` directive of docs/inputs.md#nginx-access-logs, exactly as printed by
/// `overtime nginx-format`.
pub const OVERTIME_LOG_FORMAT: &str = r#"log_format overtime '$remote_addr [$time_iso8601] "$request" $status '
    '$body_bytes_sent rt=$request_time uct="$upstream_connect_time" '
    'uht="$upstream_header_time" urt="$upstream_response_time" '
    'us="$upstream_status" ua="$upstream_addr" rid=$request_id '
    'tp="$http_traceparent" mw="$http_x_max_wait" '
    'llm="$upstream_http_x_llm_reason" llmd="$upstream_http_x_llm_duration"';"#;

/// ingress-nginx's default `log-format-upstream`, exactly as the controller
/// writes it into its nginx.conf (`log_format upstreaminfo …`;
/// `internal/ingress/controller/config/config.go`, `logFormatUpstream`).
/// `$req_id` is the client's `X-Request-ID` or nginx's `$request_id`;
/// `$proxy_upstream_name` is `<namespace>-<service>-<port>`; the
/// `$upstream_*` lists are unquoted.
pub const INGRESS_NGINX_LOG_FORMAT: &str = r#"log_format upstreaminfo '$remote_addr - $remote_user [$time_local] "$request" $status $body_bytes_sent "$http_referer" "$http_user_agent" $request_length $request_time [$proxy_upstream_name] [$proxy_alternative_upstream_name] $upstream_addr $upstream_response_length $upstream_response_time $upstream_status $req_id';"#;

/// nginx's predefined `combined` format as a directive.
pub const COMBINED_LOG_FORMAT: &str = r#"log_format combined '$remote_addr - $remote_user [$time_local] "$request" $status $body_bytes_sent "$http_referer" "$http_user_agent"';"#;

/// A format overtime knows by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BuiltinFormat {
    /// The name for `--log-format`, the config and [`LogFormat::builtin`].
    pub name: &'static str,
    /// Other names accepted for it.
    pub aliases: &'static [&'static str],
    /// One line: who writes it.
    pub about: &'static str,
    /// The `log_format` directive, as nginx.conf would hold it.
    pub directive: &'static str,
}

/// Every built-in format, the recommended one first.
pub const BUILTIN_FORMATS: &[BuiltinFormat] = &[
    BuiltinFormat {
        name: "overtime",
        aliases: &[],
        about: "the recommended format: upstream timings per try, trace id, model-server headers",
        directive: OVERTIME_LOG_FORMAT,
    },
    BuiltinFormat {
        name: "ingress-nginx",
        aliases: &["upstreaminfo"],
        about: "the Kubernetes ingress-nginx controller's default (log_format upstreaminfo)",
        directive: INGRESS_NGINX_LOG_FORMAT,
    },
    BuiltinFormat {
        name: "combined",
        aliases: &[],
        about: "nginx's predefined format (no upstream timings, no trace id)",
        directive: COMBINED_LOG_FORMAT,
    },
];

pub(crate) fn builtin_names() -> String {
    BUILTIN_FORMATS
        .iter()
        .map(|b| b.name)
        .collect::<Vec<_>>()
        .join(", ")
}
