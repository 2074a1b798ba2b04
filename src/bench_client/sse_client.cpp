#include "bench_client/sse_client.h"

namespace dsv4::bench {

std::vector<SseParser::Event> SseParser::feed(std::string_view bytes) {
  std::vector<Event> out;
  buf_.append(bytes);
  size_t start = 0;
  for (size_t nl; (nl = buf_.find('\n', start)) != std::string::npos; start = nl + 1) {
    std::string_view line(buf_.data() + start, nl - start);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) {  // end of an event
      if (has_data_) out.push_back({data_, false});
      data_.clear();
      has_data_ = false;
    } else if (line.front() == ':') {
      out.push_back({"", true});
    } else if (line.substr(0, 5) == "data:") {
      std::string_view v = line.substr(5);
      if (!v.empty() && v.front() == ' ') v.remove_prefix(1);
      if (has_data_) data_ += '\n';
      data_.append(v);
      has_data_ = true;
    }  // other fields (event:, id:, retry:) are not used by OpenAI streams
  }
  buf_.erase(0, start);
  return out;
}

StreamResult post_stream(httplib::Client& client, const std::string& path, const std::string& body,
                         const httplib::Headers& headers,
                         const std::function<bool(const SseParser::Event&)>& on_event) {
  StreamResult result;
  SseParser parser;
  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.headers = headers;
  req.headers.emplace("Content-Type", "application/json");
  req.headers.emplace("Accept", "text/event-stream");
  req.body = body;
  int status = 0;
  req.response_handler = [&status](const httplib::Response& r) {
    status = r.status;
    return true;
  };
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    if (status < 200 || status >= 300) {
      result.body.append(data, n);
      return true;
    }
    for (const auto& e : parser.feed(std::string_view(data, n))) {
      if (!on_event(e)) return false;
    }
    return true;
  };
  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  const bool ok = client.send(req, res, err);
  result.status = status != 0 ? status : res.status;
  if (!ok && err != httplib::Error::Canceled) result.error = httplib::to_string(err);
  if (!ok && result.status <= 0) result.status = 0;
  return result;
}

}  // namespace dsv4::bench
