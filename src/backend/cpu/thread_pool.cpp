#include "backend/cpu/thread_pool.h"

namespace kiln::backend {

ThreadPool::ThreadPool(int workers) {
  for (int i = 0; i < workers; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::worker_loop(int index) {
  uint64_t seen = 0;
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
    if (stop_) return;
    seen = generation_;
    if (index + 1 >= active_limit_) continue;  // this launch uses fewer threads
    ++running_;
    while (next_ < tasks_) {
      const int64_t task = next_++;
      lock.unlock();
      (*body_)(task);
      lock.lock();
    }
    if (--running_ == 0) done_.notify_all();
  }
}

void ThreadPool::parallel_for(int64_t tasks, int threads, const std::function<void(int64_t)>& body) {
  if (tasks <= 0) return;
  if (threads <= 1 || tasks == 1 || workers_.empty()) {
    for (int64_t t = 0; t < tasks; ++t) body(t);
    return;
  }
  std::lock_guard<std::mutex> run(run_mutex_);
  std::unique_lock<std::mutex> lock(mutex_);
  body_ = &body;
  tasks_ = tasks;
  next_ = 0;
  active_limit_ = threads;
  ++running_;  // the caller
  ++generation_;
  wake_.notify_all();
  while (next_ < tasks_) {
    const int64_t task = next_++;
    lock.unlock();
    body(task);
    lock.lock();
  }
  --running_;
  done_.wait(lock, [&] { return running_ == 0; });
  body_ = nullptr;
}

}  // namespace kiln::backend
