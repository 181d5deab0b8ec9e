// GraphCopier: builds a new graph from an old one node by node, remapping values. Passes use it to drop,
// replace or insert nodes without mutating their input.
#pragma once

#include <string>
#include <vector>

#include "ir/graph.h"

namespace kiln::passes {

class GraphCopier {
 public:
  // Copies the name and all graph inputs (same names, types, bindings).
  explicit GraphCopier(const Graph& source);

  const Graph& source() const { return source_; }
  Graph& target() { return target_; }

  // The target value a source value maps to (must be mapped already).
  ValueId map(ValueId source_value) const;
  bool is_mapped(ValueId source_value) const { return map_[source_value] >= 0; }
  void set_map(ValueId source_value, ValueId target_value) { map_[source_value] = target_value; }

  // Copies a source node with its inputs remapped and its output names and group kept; maps its outputs.
  void copy_node(NodeId id);
  // The same node with other attributes and these (target) inputs, e.g. mapped_inputs(id) with one replaced.
  void copy_node_with(NodeId id, Attrs attrs, std::vector<ValueId> target_inputs);
  // A source node's inputs, remapped.
  std::vector<ValueId> mapped_inputs(NodeId id) const;
  // Adds a new node to the target (a pass's own node, of target values); a node that does not verify is an
  // internal error of `pass`, which stops the program.
  std::vector<ValueId> add(const char* pass, Op op, std::vector<ValueId> inputs, Attrs attrs,
                           std::vector<std::string> names);
  // `stem`, or `stem.N`: a name used by no source value (those are copied later under their own names) and
  // no target value.
  std::string fresh_name(const std::string& stem) const;
  // Copies the graph outputs (remapped) and returns the finished graph.
  Graph finish();

 private:
  const Graph& source_;
  Graph target_;
  std::vector<ValueId> map_;
};

}  // namespace kiln::passes
