// The head-to-head of docs/performance.md ("CPU: kiln optimize with the knowledge base"): an interleaved A/B
// (agent::ab_compare, 24 rounds, 3 times) of two saved plans, the paths in KILN_AB_A and KILN_AB_B (a ratio
// above 1: B is faster). Not part of the build: copy it to tests/agent/zz_ab_test.cpp, build kiln_tests and run
//   KILN_AB_A=kiln-out-32/plan.json KILN_AB_B=kiln-out-32-cold/plan.json build/release/tests/kiln_tests --gtest_filter='ZZAB.*'
#include <gtest/gtest.h>
#include <fmt/format.h>
#include <cstdlib>
#include "agent/ab_gate.h"
#include "backend/plan_artifact.h"
#include "models/weights.h"

namespace kiln {
TEST(ZZAB, Plans) {
  const char* pa = std::getenv("KILN_AB_A");
  const char* pb = std::getenv("KILN_AB_B");
  if (!pa || !pb) GTEST_SKIP();
  auto backend = backend::make_backend("cpu");
  ASSERT_TRUE(backend.ok());
  auto a = backend::load_plan_artifact(**backend, pa);
  auto b = backend::load_plan_artifact(**backend, pb);
  ASSERT_TRUE(a.ok()) << a.error().message;
  ASSERT_TRUE(b.ok()) << b.error().message;
  auto ia = models::random_inputs(a->plan->graph(), 0);
  auto ib = models::random_inputs(b->plan->graph(), 0);
  ASSERT_TRUE(a->plan->run(ia).ok());
  ASSERT_TRUE(b->plan->run(ib).ok());
  backend::Plan* A = a->plan.get();
  backend::Plan* B = b->plan.get();
  auto ra = (*backend)->capture([A] { return A->execute(); });
  auto rb = (*backend)->capture([B] { return B->execute(); });
  ASSERT_TRUE(ra.ok() && rb.ok());
  for (int rep = 0; rep < 3; ++rep) {
    agent::ABOptions o;
    o.rounds = 24;
    auto v = agent::ab_compare(**backend, *ra, *rb, o);
    ASSERT_TRUE(v.ok());
    fmt::print("A={} B={}: {}\n", pa, pb, v->summary);
  }
}
}
