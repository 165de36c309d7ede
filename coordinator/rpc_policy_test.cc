#include "coordinator/rpc_policy.h"

#include <set>
#include <string>

#include "google/protobuf/descriptor.h"
#include "gtest/gtest.h"
#include "mesa/v1/cluster_service.pb.h"
#include "mesa/v1/job_service.pb.h"
#include "mesa/v1/worker_service.pb.h"

namespace mesa::coordinator {
namespace {

// Every row sits at its Rpc's index, and every method of the three services has exactly one row
// (a new RPC without a row fails here).
TEST(RpcPolicyTest, OneRowPerMethodOfTheThreeServices) {
  std::set<std::string> methods;
  for (size_t i = 0; i < RpcPolicies().size(); ++i) {
    const RpcPolicy& row = RpcPolicies()[i];
    EXPECT_EQ(static_cast<size_t>(row.rpc), i) << row.method;
    EXPECT_EQ(&PolicyOf(row.rpc), &row);
    EXPECT_TRUE(methods.insert(row.method).second) << row.method << " twice";
  }
  std::set<std::string> service_methods;
  for (const char* name :
       {"mesa.v1.JobService", "mesa.v1.WorkerService", "mesa.v1.ClusterService"}) {
    const google::protobuf::ServiceDescriptor* service =
        google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(name);
    ASSERT_NE(service, nullptr) << name;
    for (int m = 0; m < service->method_count(); ++m) {
      service_methods.insert(service->method(m)->name());
    }
  }
  EXPECT_EQ(methods, service_methods);
}

}  // namespace
}  // namespace mesa::coordinator
