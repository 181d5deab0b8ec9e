// Who reads each value of a graph, for passes that fold a chain of nodes into one: a chain may absorb a value
// only when its one reader is the next link and nothing outside (another node, a graph output) sees it.
#pragma once

#include <vector>

#include "ir/graph.h"

namespace kiln::passes {

class ValueReaders {
 public:
  explicit ValueReaders(const Graph& graph) : readers_(graph.values().size()), is_output_(graph.values().size(), false) {
    for (NodeId id = 0; id < static_cast<NodeId>(graph.nodes().size()); ++id) {
      for (ValueId v : graph.node(id).inputs) readers_[v].push_back(id);
    }
    for (const GraphOutput& o : graph.outputs()) is_output_[o.value] = true;
  }
  // Every node that reads `v`, in graph order (a node reading it twice is listed twice).
  const std::vector<NodeId>& of(ValueId v) const { return readers_[v]; }
  // The one node that reads `v`, or -1 when it has several readers, none, or is a graph output.
  NodeId only_reader(ValueId v) const { return readers_[v].size() == 1 && !is_output_[v] ? readers_[v][0] : -1; }
  bool is_output(ValueId v) const { return is_output_[v]; }

 private:
  std::vector<std::vector<NodeId>> readers_;
  std::vector<bool> is_output_;
};

}  // namespace kiln::passes
