#include "tokenizer/json_fields.h"

#include "core/error.h"

namespace dsv4::json_fields {

std::string type_of(const json& component, std::string_view where) {
  if (component.is_null()) return "null";
  if (!component.is_object()) fail("{} must be an object", where);
  return get_string(component, "type", where);
}

std::string get_string(const json& obj, const char* key, std::string_view where) {
  const auto it = obj.find(key);
  if (it == obj.end() || !it->is_string()) fail("{}.{} must be a string", where, key);
  return it->get<std::string>();
}

bool get_bool(const json& obj, const char* key, std::string_view where, bool fallback) {
  const auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) fail("{}.{} must be true or false", where, key);
  return it->get<bool>();
}

bool absent_or_empty(const json& obj, const char* key) {
  const auto it = obj.find(key);
  return it == obj.end() || it->is_null() || (it->is_string() && it->get_ref<const std::string&>().empty());
}

}  // namespace dsv4::json_fields
