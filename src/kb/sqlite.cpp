// The SQLite C API behind RAII types and Result (sqlite.h).
#include "kb/sqlite.h"

#include <sqlite3.h>

namespace kiln::kb {

Error sqlite_error(sqlite3* db, const std::string& what) {
  const int code = db ? sqlite3_extended_errcode(db) : SQLITE_ERROR;
  const char* message = db ? sqlite3_errmsg(db) : "out of memory";
  return make_error(ErrorCode::io_error, what + ": " + message + " (" + sqlite3_errstr(code) + ")");
}

// --- Statement ---

Statement::Statement(Statement&& other) noexcept { *this = std::move(other); }

Statement& Statement::operator=(Statement&& other) noexcept {
  if (this != &other) {
    if (stmt_) sqlite3_finalize(stmt_);
    db_ = other.db_;
    stmt_ = other.stmt_;
    sql_ = std::move(other.sql_);
    other.stmt_ = nullptr;
  }
  return *this;
}

Statement::~Statement() {
  if (stmt_) sqlite3_finalize(stmt_);
}

// A failed bind means a wrong parameter index or type in kiln's own SQL: an invariant, not an input error.
Statement& Statement::bind(int index, const std::string& text) {
  KILN_CHECK(sqlite3_bind_text(stmt_, index, text.data(), static_cast<int>(text.size()), SQLITE_TRANSIENT) ==
             SQLITE_OK);
  return *this;
}
Statement& Statement::bind(int index, int64_t value) {
  KILN_CHECK(sqlite3_bind_int64(stmt_, index, value) == SQLITE_OK);
  return *this;
}
Statement& Statement::bind(int index, double value) {
  KILN_CHECK(sqlite3_bind_double(stmt_, index, value) == SQLITE_OK);
  return *this;
}
Statement& Statement::bind_null(int index) {
  KILN_CHECK(sqlite3_bind_null(stmt_, index) == SQLITE_OK);
  return *this;
}
Statement& Statement::bind(int index, const std::optional<std::string>& text) {
  return text ? bind(index, *text) : bind_null(index);
}

Result<bool> Statement::step() {
  const int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  Error error = sqlite_error(db_, sql_.substr(0, 60));
  sqlite3_reset(stmt_);
  return error;
}

Status Statement::run() {
  KILN_ASSIGN_OR_RETURN(bool row, step());
  while (row) {
    KILN_ASSIGN_OR_RETURN(row, step());
  }
  reset();
  return ok_status();
}

void Statement::reset() { sqlite3_reset(stmt_); }

std::string Statement::text(int column) const {
  const unsigned char* p = sqlite3_column_text(stmt_, column);
  return p ? std::string(reinterpret_cast<const char*>(p), static_cast<size_t>(sqlite3_column_bytes(stmt_, column)))
           : std::string();
}
int64_t Statement::integer(int column) const { return sqlite3_column_int64(stmt_, column); }
double Statement::real(int column) const { return sqlite3_column_double(stmt_, column); }
bool Statement::is_null(int column) const { return sqlite3_column_type(stmt_, column) == SQLITE_NULL; }

// --- Database ---

Result<Database> Database::open(const std::string& path, bool create, int busy_timeout_ms) {
  sqlite3* raw = nullptr;
  const int flags = SQLITE_OPEN_READWRITE | (create ? SQLITE_OPEN_CREATE : 0) | SQLITE_OPEN_NOMUTEX;
  const int rc = sqlite3_open_v2(path.c_str(), &raw, flags, nullptr);
  Database db;
  db.db_ = std::shared_ptr<sqlite3>(raw, [](sqlite3* p) { sqlite3_close_v2(p); });
  db.path_ = path;
  if (rc != SQLITE_OK) {
    if (!create && rc == SQLITE_CANTOPEN) {
      return make_error(ErrorCode::io_error, "knowledge base " + path + " does not exist (or cannot be opened)");
    }
    return sqlite_error(raw, "open knowledge base " + path);
  }
  sqlite3_busy_timeout(raw, busy_timeout_ms);
  sqlite3_extended_result_codes(raw, 1);
  return db;
}

Status Database::exec(const std::string& sql) {
  char* message = nullptr;
  if (sqlite3_exec(db_.get(), sql.c_str(), nullptr, nullptr, &message) != SQLITE_OK) {
    sqlite3_free(message);
    return sqlite_error(db_.get(), sql.substr(0, 60));
  }
  return ok_status();
}

Result<Statement> Database::prepare(const std::string& sql) {
  sqlite3_stmt* stmt = nullptr;
  if (sqlite3_prepare_v2(db_.get(), sql.c_str(), static_cast<int>(sql.size()), &stmt, nullptr) != SQLITE_OK) {
    return sqlite_error(db_.get(), "prepare '" + sql.substr(0, 60) + "'");
  }
  return Statement(db_.get(), stmt, sql);
}

Result<int64_t> Database::query_integer(const std::string& sql) {
  KILN_ASSIGN_OR_RETURN(Statement stmt, prepare(sql));
  KILN_ASSIGN_OR_RETURN(bool row, stmt.step());
  return row ? stmt.integer(0) : int64_t{0};
}

int64_t Database::changes() const { return sqlite3_changes64(db_.get()); }

bool Database::in_transaction() const { return sqlite3_get_autocommit(db_.get()) == 0; }

// --- Transaction ---

Result<Transaction> Transaction::begin(Database& db) {
  KILN_TRY(db.exec("BEGIN IMMEDIATE"));
  return Transaction(&db);
}

Transaction::~Transaction() {
  if (db_ && db_->in_transaction()) (void)db_->exec("ROLLBACK");
}

Status Transaction::commit() {
  KILN_CHECK(db_ != nullptr);
  Status status = db_->exec("COMMIT");
  if (status.ok()) db_ = nullptr;
  return status;
}

}  // namespace kiln::kb
