#include "json.h"

#include <cctype>
#include <cstdlib>

namespace collx::algorithms::json {

namespace {

class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  Value document() {
    Value v = value();
    skipSpace();
    if (pos_ != text_.size()) fail("unexpected text after the document");
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw ParseError("line " + std::to_string(line_) + ", column " + std::to_string(column_) +
                     ": " + what);
  }

  char peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }

  char next() {
    char c = peek();
    ++pos_;
    if (c == '\n') {
      ++line_;
      column_ = 1;
    } else {
      ++column_;
    }
    return c;
  }

  void skipSpace() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(peek()))) next();
  }

  void expect(char c) {
    skipSpace();
    if (peek() != c) fail(std::string("expected '") + c + "'");
    next();
  }

  Value value() {
    skipSpace();
    Value v;
    v.line = line_;
    v.column = column_;
    char c = peek();
    if (c == '{') {
      auto object = std::make_shared<Object>();
      next();
      skipSpace();
      if (peek() == '}') {
        next();
      } else {
        while (true) {
          skipSpace();
          if (peek() != '"') fail("expected a quoted key");
          std::string key = string();
          expect(':');
          object->emplace_back(std::move(key), value());
          skipSpace();
          if (peek() == ',') {
            next();
            continue;
          }
          expect('}');
          break;
        }
      }
      v.data = object;
    } else if (c == '[') {
      auto array = std::make_shared<Array>();
      next();
      skipSpace();
      if (peek() == ']') {
        next();
      } else {
        while (true) {
          array->push_back(value());
          skipSpace();
          if (peek() == ',') {
            next();
            continue;
          }
          expect(']');
          break;
        }
      }
      v.data = array;
    } else if (c == '"') {
      v.data = string();
    } else if (c == '-' || std::isdigit(static_cast<unsigned char>(c))) {
      std::size_t start = pos_;
      while (pos_ < text_.size() &&
             (std::isdigit(static_cast<unsigned char>(peek())) || peek() == '-' || peek() == '+' ||
              peek() == '.' || peek() == 'e' || peek() == 'E')) {
        next();
      }
      std::string number(text_.substr(start, pos_ - start));
      char* end = nullptr;
      double d = std::strtod(number.c_str(), &end);
      if (end != number.c_str() + number.size()) fail("bad number '" + number + "'");
      v.data = d;
    } else if (text_.substr(pos_, 4) == "true") {
      for (int i = 0; i < 4; ++i) next();
      v.data = true;
    } else if (text_.substr(pos_, 5) == "false") {
      for (int i = 0; i < 5; ++i) next();
      v.data = false;
    } else if (text_.substr(pos_, 4) == "null") {
      for (int i = 0; i < 4; ++i) next();
      v.data = nullptr;
    } else {
      fail(c == '\0' ? "unexpected end of the document" : std::string("unexpected '") + c + "'");
    }
    return v;
  }

  std::string string() {
    next();  // the opening quote
    std::string out;
    while (true) {
      if (pos_ >= text_.size()) fail("unterminated string");
      char c = next();
      if (c == '"') return out;
      if (c == '\\') {
        char e = next();
        switch (e) {
          case '"':
            out += '"';
            break;
          case '\\':
            out += '\\';
            break;
          case '/':
            out += '/';
            break;
          case 'n':
            out += '\n';
            break;
          case 't':
            out += '\t';
            break;
          case 'r':
            out += '\r';
            break;
          case 'b':
            out += '\b';
            break;
          case 'f':
            out += '\f';
            break;
          default:
            fail(std::string("unsupported escape '\\") + e + "'");
        }
        continue;
      }
      out += c;
    }
  }

  std::string_view text_;
  std::size_t pos_ = 0;
  int line_ = 1;
  int column_ = 1;
};

}  // namespace

Value parse(std::string_view text) { return Parser(text).document(); }

}  // namespace collx::algorithms::json
