// A fixed pool of worker threads for the CPU backend: parallel_for hands out task indices to the workers and
// the calling thread, and returns when all are done. One parallel_for at a time per pool.
#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace kiln::backend {

class ThreadPool {
 public:
  explicit ThreadPool(int workers);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }
  // Runs body(task) for task in [0, tasks) on up to `threads` threads (the caller included).
  void parallel_for(int64_t tasks, int threads, const std::function<void(int64_t)>& body);

 private:
  void worker_loop(int index);

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::mutex run_mutex_;
  std::condition_variable wake_, done_;
  const std::function<void(int64_t)>* body_ = nullptr;
  int64_t tasks_ = 0;
  int64_t next_ = 0;
  int active_limit_ = 0;
  int running_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
};

}  // namespace kiln::backend
