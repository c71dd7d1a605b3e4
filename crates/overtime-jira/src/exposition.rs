//! The Jira notifier's counters in the Prometheus text format, for the
//! collector's `/metrics` (families documented in `docs/metrics.md`).

use crate::notifier::JiraStats;
use std::fmt::Write;

impl JiraStats {
    /// Appends the `overtime_jira_*` families.
    ///
    /// ```
    /// let stats = overtime_jira::JiraStats {
    ///     created: 2,
    ///     queued: 1,
    ///     ..Default::default()
    /// };
    /// let mut text = String::new();
    /// stats.render_prometheus(&mut text);
    /// assert!(text.contains("overtime_jira_events_total{result=\"created\"} 2\n"));
    /// assert!(text.contains("overtime_jira_outbox_queued 1\n"));
    /// ```
    pub fn render_prometheus(&self, out: &mut String) {
        out.push_str(
            "# HELP overtime_jira_events_total Incident events handled by the Jira notifier, by result.\n\
             # TYPE overtime_jira_events_total counter\n",
        );
        for (result, n) in [
            ("created", self.created),
            ("commented", self.commented),
            ("reopened", self.reopened),
            ("found_existing", self.found_existing),
            ("failed", self.failed),
            ("skipped_unknown", self.skipped_unknown),
            ("skipped_duplicate", self.skipped_duplicate),
        ] {
            let _ = writeln!(out, "overtime_jira_events_total{{result=\"{result}\"}} {n}");
        }
        out.push_str(
            "# HELP overtime_jira_retries_total Jira calls that failed transiently and were retried, by cause.\n\
             # TYPE overtime_jira_retries_total counter\n",
        );
        let _ = writeln!(
            out,
            "overtime_jira_retries_total{{cause=\"rate_limited\"}} {}",
            self.rate_limited
        );
        let _ = writeln!(
            out,
            "overtime_jira_retries_total{{cause=\"other\"}} {}",
            self.retries.saturating_sub(self.rate_limited)
        );
        out.push_str(
            "# HELP overtime_jira_outbox_queued Incident events waiting in the durable outbox.\n\
             # TYPE overtime_jira_outbox_queued gauge\n",
        );
        let _ = writeln!(out, "overtime_jira_outbox_queued {}", self.queued);
        out.push_str(
            "# HELP overtime_jira_bad_outbox_files_total Unreadable outbox files set aside at start.\n\
             # TYPE overtime_jira_bad_outbox_files_total counter\n",
        );
        let _ = writeln!(
            out,
            "overtime_jira_bad_outbox_files_total {}",
            self.bad_outbox_files
        );
    }
}
