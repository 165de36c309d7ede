// mesactl: the command-line client of the MesaNet coordinator. See docs/mesactl.md.

#include <sys/ioctl.h>
#include <unistd.h>

#include <iostream>
#include <string>

#include "cli/client.h"
#include "cli/command_line.h"
#include "cli/config.h"
#include "cli/format.h"

int main(int argc, char** argv) {
  mesa::cli::CommandLine command_line;
  mesa::cli::Invocation invocation = command_line.Parse(argc, argv, std::cout, std::cerr);
  if (invocation.exit_code.has_value()) return *invocation.exit_code;
  const mesa::cli::GlobalFlags& globals = invocation.globals;

  // Flags and environment variables (CLI11 took each from either), then the file's context.
  absl::StatusOr<mesa::cli::ContextSettings> context = mesa::cli::LoadContext(
      globals.config.empty() ? mesa::cli::DefaultConfigPath() : globals.config, globals.context,
      /*must_exist=*/!globals.config.empty());
  if (!context.ok()) {
    std::cerr << "mesactl: " << context.status().message() << "\n";
    return 2;
  }
  for (const std::string& warning : context->warnings) std::cerr << "mesactl: " << warning << "\n";

  mesa::cli::Options& options = invocation.options;
  options.server = !globals.server.empty()    ? globals.server
                   : !context->server.empty() ? context->server
                                              : "127.0.0.1:50051";
  options.tty = isatty(STDOUT_FILENO) == 1;
  winsize ws{};
  if (options.tty && ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) {
    options.terminal_width = ws.ws_col;
  }
  mesa::cli::ConnectOptions connect{
      .ca = globals.ca.empty() ? context->ca : globals.ca,
      .token = globals.token.empty() ? context->token : globals.token};
  auto client = mesa::cli::JobClient::Connect(options.server, options.timeout, connect);
  if (!client.ok()) {
    std::cerr << "mesactl: " << client.status().message() << "\n";
    return 2;
  }
  return invocation.run(**client, options, invocation.args, std::cout, std::cerr);
}
