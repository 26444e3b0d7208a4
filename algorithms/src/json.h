// A small JSON reader (internal): enough for configuration files (objects, arrays, strings,
// numbers, true, false, null). Errors name the line and column.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace collx::algorithms::json {

struct Value;
using Object = std::vector<std::pair<std::string, Value>>;  // in file order
using Array = std::vector<Value>;

struct Value {
  std::variant<std::nullptr_t, bool, double, std::string, std::shared_ptr<Array>,
               std::shared_ptr<Object>>
      data;
  int line = 0;
  int column = 0;

  bool isObject() const { return std::holds_alternative<std::shared_ptr<Object>>(data); }
  bool isArray() const { return std::holds_alternative<std::shared_ptr<Array>>(data); }
  bool isString() const { return std::holds_alternative<std::string>(data); }
  bool isNumber() const { return std::holds_alternative<double>(data); }
  const Object& object() const { return *std::get<std::shared_ptr<Object>>(data); }
  const Array& array() const { return *std::get<std::shared_ptr<Array>>(data); }
  const std::string& string() const { return std::get<std::string>(data); }
  double number() const { return std::get<double>(data); }
  std::string where() const {
    return "line " + std::to_string(line) + ", column " + std::to_string(column);
  }
};

class ParseError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Parses a whole document; throws ParseError ("line 3, column 7: expected ...").
Value parse(std::string_view text);

}  // namespace collx::algorithms::json
