// tests/e2e_pg: pgjdbc (the PostgreSQL JDBC driver DBeaver, Metabase and
// every JVM tool use; Debian's libpostgresql-jdbc-java, pgjdbc 42.5 — the
// test machines reach Debian's mirror but not Maven Central) against
// overtime's PostgreSQL wire protocol. Run as a single-file program (java's
// source launcher: a JDK, not a JRE):
//
//   java -cp /usr/share/java/postgresql.jar JdbcClient.java HOST PORT TOKEN QUERY_FILE...
//
// Prints one JSON object per line for clients.py to compare with
// POST /api/sql: the tables and the verdicts columns DatabaseMetaData lists
// (DBeaver's navigator reads these), each query file's rows (getString), a
// PreparedStatement's rows, and what a Statement.cancel() of a long query
// answered. Exits non-zero on any unexpected error.

import java.nio.file.Files;
import java.nio.file.Path;
import java.sql.*;
import java.util.*;

public class JdbcClient {
    static String json(String s) {
        if (s == null) return "null";
        StringBuilder b = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            switch (c) {
                case '"': b.append("\\\""); break;
                case '\\': b.append("\\\\"); break;
                case '\n': b.append("\\n"); break;
                case '\r': b.append("\\r"); break;
                case '\t': b.append("\\t"); break;
                default:
                    if (c < 0x20) b.append(String.format("\\u%04x", (int) c));
                    else b.append(c);
            }
        }
        return b.append('"').toString();
    }

    static String list(List<String> xs) {
        StringJoiner j = new StringJoiner(",", "[", "]");
        for (String x : xs) j.add(json(x));
        return j.toString();
    }

    static void emit(String what, String name, ResultSet rs) throws SQLException {
        ResultSetMetaData md = rs.getMetaData();
        List<String> cols = new ArrayList<>();
        for (int i = 1; i <= md.getColumnCount(); i++) cols.add(md.getColumnLabel(i));
        StringJoiner rows = new StringJoiner(",", "[", "]");
        while (rs.next()) {
            List<String> row = new ArrayList<>();
            for (int i = 1; i <= cols.size(); i++) row.add(rs.getString(i));
            rows.add(list(row));
        }
        System.out.println("{\"what\":" + json(what) + ",\"name\":" + json(name)
                + ",\"columns\":" + list(cols) + ",\"rows\":" + rows + "}");
    }

    public static void main(String[] args) throws Exception {
        String url = "jdbc:postgresql://" + args[0] + ":" + args[1] + "/overtime?sslmode=disable";
        Properties p = new Properties();
        p.setProperty("user", "overtime");
        p.setProperty("password", args[2]);
        try (Connection c = DriverManager.getConnection(url, p)) {
            DatabaseMetaData md = c.getMetaData();
            emit("tables", "", md.getTables(null, "public", "%", new String[] {"TABLE"}));
            emit("columns", "verdicts", md.getColumns(null, "public", "verdicts", "%"));
            for (int i = 3; i < args.length; i++) {
                String sql = Files.readString(Path.of(args[i]));
                try (Statement s = c.createStatement()) {
                    emit("query", Path.of(args[i]).getFileName().toString(), s.executeQuery(sql));
                }
            }
            try (PreparedStatement ps = c.prepareStatement(
                    "SELECT count(*) AS n FROM verdicts WHERE outcome = ? AND elapsed_ms >= ?")) {
                ps.setString(1, "gateway_timeout");
                ps.setDouble(2, 0.0);
                emit("param", "", ps.executeQuery());
            }
            // A query that never ends, cancelled from another thread once
            // it runs (pgjdbc sends a CancelRequest on a new connection).
            try (Statement s = c.createStatement()) {
                Thread t = new Thread(() -> {
                    try {
                        Thread.sleep(1000);
                        s.cancel();
                    } catch (Exception e) {
                        throw new RuntimeException(e);
                    }
                });
                t.start();
                String state = "none", message = "";
                try {
                    s.executeQuery("WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT count(*) FROM r");
                } catch (SQLException e) {
                    state = e.getSQLState();
                    message = e.getMessage();
                }
                t.join();
                System.out.println("{\"what\":\"cancel\",\"sqlstate\":" + json(state) + ",\"message\":" + json(message) + "}");
            }
            // The connection still answers after the cancel.
            try (Statement s = c.createStatement()) {
                emit("after_cancel", "", s.executeQuery("SELECT 1 AS one"));
            }
        }
    }
}
