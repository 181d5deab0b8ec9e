// A thin RAII layer over the SQLite C API for the knowledge base: a connection, prepared statements and a
// transaction guard, every failing call an Error naming the call and SQLite's own message. Nothing else in
// kiln includes sqlite3.h.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "util/result.h"

struct sqlite3;
struct sqlite3_stmt;

namespace kiln::kb {

class Statement {
 public:
  Statement() = default;
  Statement(Statement&& other) noexcept;
  Statement& operator=(Statement&& other) noexcept;
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;
  ~Statement();

  // Parameters are 1-based, as in SQL's ?1, ?2.
  Statement& bind(int index, const std::string& text);
  Statement& bind(int index, const char* text) { return bind(index, std::string(text)); }
  Statement& bind(int index, int value) { return bind(index, static_cast<int64_t>(value)); }
  Statement& bind(int index, int64_t value);
  Statement& bind(int index, double value);
  Statement& bind_null(int index);
  Statement& bind(int index, const std::optional<std::string>& text);

  // Advances to the next row: true when there is one, false when done; an Error when the step failed.
  Result<bool> step();
  // Runs a statement that returns no rows to completion.
  Status run();
  void reset();  // ready to run again, bindings kept

  std::string text(int column) const;  // "" for NULL
  int64_t integer(int column) const;
  double real(int column) const;
  bool is_null(int column) const;

 private:
  friend class Database;
  Statement(sqlite3* db, sqlite3_stmt* stmt, std::string sql) : db_(db), stmt_(stmt), sql_(std::move(sql)) {}
  sqlite3* db_ = nullptr;
  sqlite3_stmt* stmt_ = nullptr;
  std::string sql_;
};

class Database {
 public:
  // Opens (creating when `create`) the file; the connection waits up to `busy_timeout_ms` for another
  // connection's write lock instead of failing at once.
  static Result<Database> open(const std::string& path, bool create, int busy_timeout_ms = 5000);
  Database() = default;

  Status exec(const std::string& sql);  // one or more statements, no rows
  Result<Statement> prepare(const std::string& sql);
  // The first column of the first row of `sql` as an integer (e.g. PRAGMA user_version).
  Result<int64_t> query_integer(const std::string& sql);
  int64_t changes() const;    // rows changed by the last statement
  bool in_transaction() const;
  const std::string& path() const { return path_; }
  sqlite3* handle() const { return db_.get(); }

 private:
  std::shared_ptr<sqlite3> db_;
  std::string path_;
};

// BEGIN IMMEDIATE on construction (the write lock is taken up front, so a transaction never fails halfway for
// a lock); ROLLBACK on destruction unless commit() succeeded.
class Transaction {
 public:
  static Result<Transaction> begin(Database& db);
  Transaction(Transaction&& other) noexcept : db_(other.db_) { other.db_ = nullptr; }
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;
  ~Transaction();
  Status commit();

 private:
  explicit Transaction(Database* db) : db_(db) {}
  Database* db_ = nullptr;
};

// Error for a failed SQLite call on `db`: "<what>: <sqlite message> (<code name>)".
Error sqlite_error(sqlite3* db, const std::string& what);

}  // namespace kiln::kb
