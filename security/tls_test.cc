#include "security/tls.h"

#include <fstream>

#include "gtest/gtest.h"

namespace mesa::security {
namespace {

TEST(IsLoopbackAddress, LoopbackHosts) {
  EXPECT_TRUE(IsLoopbackAddress("127.0.0.1:50051"));
  EXPECT_TRUE(IsLoopbackAddress("127.1.2.3:0"));
  EXPECT_TRUE(IsLoopbackAddress("localhost:50051"));
  EXPECT_TRUE(IsLoopbackAddress("[::1]:50051"));
}

TEST(IsLoopbackAddress, OtherHostsAndWildcards) {
  EXPECT_FALSE(IsLoopbackAddress("0.0.0.0:50051"));
  EXPECT_FALSE(IsLoopbackAddress("[::]:50051"));
  EXPECT_FALSE(IsLoopbackAddress("10.0.0.1:50051"));
  EXPECT_FALSE(IsLoopbackAddress("128.0.0.1:50051"));
  EXPECT_FALSE(IsLoopbackAddress("example.com:50051"));
  EXPECT_FALSE(IsLoopbackAddress(":50051"));
  EXPECT_FALSE(IsLoopbackAddress("[::1:50051"));
}

TEST(Credentials, FlagCombinations) {
  EXPECT_FALSE(ServerCredentialsFromFiles({.cert = "a.pem"}).ok());
  EXPECT_FALSE(ChannelCredentialsFromFiles({.cert = "c.pem"}).ok());
  EXPECT_FALSE(ChannelCredentialsFromFiles({.ca = "ca.pem", .cert = "c.pem"}).ok());
  EXPECT_TRUE(ChannelCredentialsFromFiles({}).ok());  // plaintext
}

TEST(ReadPem, RefusesMissingAndNonPemFiles) {
  const std::string dir = ::testing::TempDir();
  EXPECT_FALSE(ReadPem(dir + "/missing.pem", "ca").ok());
  std::ofstream(dir + "/not.pem") << "hello\n";
  absl::StatusOr<std::string> pem = ReadPem(dir + "/not.pem", "ca");
  ASSERT_FALSE(pem.ok());
  EXPECT_NE(pem.status().message().find("--ca"), std::string::npos);
  std::ofstream(dir + "/ok.pem") << "-----BEGIN CERTIFICATE-----\nx\n-----END CERTIFICATE-----\n";
  EXPECT_TRUE(ReadPem(dir + "/ok.pem", "ca").ok());
}

}  // namespace
}  // namespace mesa::security
