// The server's listening socket: bound before the model loads (so that /health answers 503 "Loading model"
// at once), with a backlog wide enough for a benchmark's burst of connections.
#pragma once

#include <string>

namespace dsv4::server {

// A non-blocking TCP socket listening on host:port (port 0: any free port; a name such as "localhost" is
// resolved, IPv6 addresses listen on both families). Throws dsv4::Error naming the address.
int listen_socket(const std::string& host, int port);

// The port a bound socket listens on.
int bound_port(int fd);

// Raises the process's soft limit on open descriptors towards its hard limit (up to 65536): each client
// connection holds one, and a connection that cannot be accepted waits unanswered in the backlog.
void raise_descriptor_limit();

}  // namespace dsv4::server
