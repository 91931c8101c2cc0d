// Every daemon's metric table against docs/operate.md's: a metric added,
// renamed or retyped in one and not the other fails here, with the line.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "flowtune/daemon/metrics.h"
#include "flowtune/metrics/doc_table.h"
#include "flowtune/pacer/metrics.h"
#include "flowtune/relay/metrics.h"
#include "flowtune/witness/metrics.h"

namespace flowtune {
namespace {

std::string manual() {
  std::ifstream in(std::string(FT_SOURCE_DIR) + "/docs/operate.md");
  EXPECT_TRUE(in) << "docs/operate.md not found";
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

void expect_agree(const std::string& section, const std::vector<metrics::Spec>& table) {
  const std::vector<metrics::DocRow> rows = metrics::doc_rows(manual(), section);
  for (const std::string& d : metrics::compare(rows, table)) ADD_FAILURE() << section << ": " << d;
  EXPECT_EQ(rows.size(), table.size()) << section;
}

TEST(MetricsDoc, AllocatorTableAgreesWithTheManual) {
  expect_agree("allocator", daemon::allocator_metric_specs());
}

TEST(MetricsDoc, RelayTableAgreesWithTheManual) { expect_agree("relay", relay::relay_metric_specs()); }

TEST(MetricsDoc, PacerTableAgreesWithTheManual) { expect_agree("pacer", pacer::pacer_metric_specs()); }

TEST(MetricsDoc, WitnessTableAgreesWithTheManual) { expect_agree("witness", witness::witness_metric_specs()); }

}  // namespace
}  // namespace flowtune
