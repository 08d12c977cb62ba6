// Option tables: one description per set of options. A table lists the fields of a struct, each
// with its JSON key, its range or choices and a line of help; reading JSON (with every type and
// range check), writing it, the list of known keys and the documentation of the defaults all
// come from that one list, so adding an option is one line where its struct is described.
//
//   const OptionTable<Schedule>& table() {
//       static const OptionTable<Schedule> t = OptionTable<Schedule>("schedule")
//           .add("lr", "the peak rate", &Schedule::lr).above(0)
//           .add("warmup", "steps of warm-up", &Schedule::warmup).at_least(1);
//       return t;
//   }
//
// A field may sit in a nested struct (a chain of member pointers: &Options::batches,
// &BatchOptions::max_sentences), be a nested object with a table of its own, or a list of such
// objects; or be taken by its key from another table of the struct, which defines keys that several
// tables share (a model kind's table takes the keys of its family so). The defaults are those of a
// default-constructed struct.
//
// This header is internal to the library (it is not installed): it speaks nlohmann::json, which
// seqgrad uses privately. The public types keep their to_json / from_json members.
#pragma once

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "seqgrad/core/error.h"
#include "seqgrad/core/option_info.h"

namespace seqgrad::internal {

using Json = nlohmann::json;

// Parses text as JSON; an Error names `what` and the parser's message.
Json parse_json(const std::string& text, const std::string& what);

// A word of a command line as the JSON value of a field of type `type` ("integer", "number",
// "string", "true or false"): an Error names the flag when the word is not one.
Json word_as_json(const std::string& word, const std::string& type, const std::string& flag);

// A number as a message shows it: integers without a fraction, others as the shortest text that
// reads back the same (as a float, if `as_float`: 0.1f shows as 0.1).
std::string format_number(double value, bool as_float = false);

// How `read` treats a key that no field has.
struct ReadPolicy {
    bool strict = true;                           // an unknown key is an Error
    std::vector<std::string>* ignored = nullptr;  // otherwise collected here (if given)
    bool complete = true;                         // the JSON is the whole object: a required key missing is an Error
                                                  // (false when it updates values already set)
};

template <typename S>
class OptionTable {
public:
    explicit OptionTable(std::string what) : what_(std::move(what)) {}

    // One field whose value is reached from S through the member pointers of `path`.
    template <typename... Path>
    OptionTable& add(std::string key, std::string help, Path... path) {
        using Value = std::remove_cvref_t<decltype((std::declval<S&>().*....*path))>;
        auto field = std::make_shared<ValueField<Value>>();
        field->key = std::move(key);
        field->help = std::move(help);
        field->access = [path...](S& s) -> Value& { return (s.*....*path); };
        fields_.push_back(field);
        last_borrowed_ = false;
        return *this;
    }

    // A nested object described by a table of its own.
    template <typename T, typename... Path>
    OptionTable& object(std::string key, std::string help, const OptionTable<T>& table, Path... path) {
        auto field = std::make_shared<ObjectField<T>>(table);
        field->key = std::move(key);
        field->help = std::move(help);
        field->access = [path...](S& s) -> T& { return (s.*....*path); };
        fields_.push_back(field);
        last_borrowed_ = false;
        return *this;
    }

    // An object of a type of its own (one of several kinds, say), written and read by the functions
    // given: `read` gets the key's JSON object and sets the value, an Error for a bad one.
    template <typename T, typename... Path>
    OptionTable& custom(std::string key, std::string help, std::function<Json(const T&)> write,
                        std::function<void(const Json&, T&)> read, Path... path) {
        auto field = std::make_shared<CustomField<T>>();
        field->key = std::move(key);
        field->help = std::move(help);
        field->to_json = std::move(write);
        field->from_json = std::move(read);
        field->access = [path...](S& s) -> T& { return (s.*....*path); };
        fields_.push_back(field);
        return *this;
    }

    // A list of such objects.
    template <typename T, typename... Path>
    OptionTable& list(std::string key, std::string help, const OptionTable<T>& table, Path... path) {
        auto field = std::make_shared<ListField<T>>(table);
        field->key = std::move(key);
        field->help = std::move(help);
        field->access = [path...](S& s) -> std::vector<T>& { return (s.*....*path); };
        fields_.push_back(field);
        last_borrowed_ = false;
        return *this;
    }

    // Fields that another table of S defines, by key and in this order: keys that several tables
    // share (the keys of a family of models) are defined once. No constraint may follow them: it
    // would change the other table's field.
    OptionTable& add(const OptionTable& from, const std::vector<std::string>& keys) {
        for (const std::string& key : keys) {
            const auto field =
                std::find_if(from.fields_.begin(), from.fields_.end(), [&](const auto& f) { return f->key == key; });
            if (field == from.fields_.end()) throw Error(what_ + ": the table taken from has no key \"" + key + "\"");
            fields_.push_back(*field);
        }
        last_borrowed_ = true;
        return *this;
    }

    // Constraints on the field added last. Numbers: a closed or open bound on either side.
    OptionTable& at_least(double bound) { return bound_on(&Bounds::low, bound, false); }
    OptionTable& above(double bound) { return bound_on(&Bounds::low, bound, true); }
    OptionTable& at_most(double bound) { return bound_on(&Bounds::high, bound, false); }
    OptionTable& below(double bound) { return bound_on(&Bounds::high, bound, true); }
    // Text: one of these values.
    OptionTable& one_of(std::vector<std::string> choices) {
        last().choices = std::move(choices);
        return *this;
    }
    // The command line's name for the field (without dashes), when it is not the key with '-' for
    // '_' (a name older than the key).
    OptionTable& flag(std::string name) {
        last().flag = std::move(name);
        return *this;
    }
    // The key must be present when reading.
    OptionTable& required() {
        last().required = true;
        return *this;
    }

    // A check across fields, run by validate() after each field's own (e.g. a budget must be set).
    OptionTable& rule(std::function<void(const S&)> check_all) {
        rules_.push_back(std::move(check_all));
        return *this;
    }
    // Runs after read() with the keys that were given: for defaults that follow other fields
    // (a per-stack depth that defaults to the shared one).
    OptionTable& finish(std::function<void(S&, const std::set<std::string>&)> complete) {
        finish_ = std::move(complete);
        return *this;
    }

    const std::string& what() const { return what_; }
    std::vector<std::string> keys() const {
        std::vector<std::string> all;
        for (const auto& f : fields_) all.push_back(f->key);
        return all;
    }
    bool has(const std::string& key) const { return find(key) != nullptr; }

    // Sets the fields that `json` gives (the others keep their values in `into`), checking each
    // value's type. `only` (if given) limits the fields read: other known keys are accepted and
    // left alone. Ranges and rules are checked by validate(), not here.
    void read(const Json& json, S& into, const ReadPolicy& policy = {},
              const std::vector<std::string>* only = nullptr) const {
        check(json.is_object(), what_.c_str(), "expected a JSON object, got ", json.type_name());
        std::set<std::string> given;
        for (const auto& [key, value] : json.items()) {
            if (has(key)) continue;
            check(!policy.strict, what_.c_str(), "unknown key \"", key, "\"");
            if (policy.ignored) policy.ignored->push_back(key);
        }
        for (const auto& f : fields_) {
            if (!selected(*f, only)) continue;
            if (!json.contains(f->key)) {
                check(!f->required || !policy.complete, what_.c_str(), "missing \"", f->key, "\"");
                continue;
            }
            f->read(json.at(f->key), into, what_);
            given.insert(f->key);
        }
        if (finish_) finish_(into, given);
    }
    S read(const std::string& text, const ReadPolicy& policy = {}) const {
        S s;
        read(parse_json(text, what_), s, policy);
        return s;
    }

    // The fields (or those in `only`) as a JSON object.
    Json write(const S& s, const std::vector<std::string>* only = nullptr) const {
        Json json = Json::object();
        for (const auto& f : fields_)
            if (selected(*f, only)) json[f->key] = f->write(s);
        return json;
    }

    // Every field's range and choices (or those in `only`), then the rules.
    void validate(const S& s, const std::vector<std::string>* only = nullptr) const {
        for (const auto& f : fields_)
            if (selected(*f, only)) f->validate(s, what_);
        for (const auto& r : rules_) r(s);
    }

    // The fields a command line can set (values, flags and lists of words; not nested objects),
    // in order, each with its flag and help text, which shows the value in `shown` as the default
    // (by default a default-constructed S's).
    std::vector<OptionInfo> options(const S* shown = nullptr) const {
        const auto constructed = shown ? nullptr : std::make_unique<S>();
        const S* defaults = shown ? shown : constructed.get();
        std::vector<OptionInfo> all;
        for (const auto& f : fields_) {
            const std::optional<OptionInfo::Kind> kind = f->command_line_kind();
            if (!kind) continue;
            const std::string flag = f->flag.empty() ? dashed(f->key) : f->flag;
            std::string help = f->help + " (" + f->type_name() + ", default " + f->text(*defaults);
            const std::string range = f->range_text();
            if (!range.empty()) help += ", " + range;
            all.push_back({f->key, flag, help + ")", *kind});
        }
        return all;
    }
    // Sets the field of `key` from the words a command line gave its flag (none for a flag, one for
    // a value, one or more for a list), read as the field's type and checked as reading JSON does.
    void set(S& s, const std::string& key, const std::vector<std::string>& words) const {
        const Field* f = find(key);
        check(f != nullptr && f->command_line_kind(), what_.c_str(), "no option \"", key, "\" to set");
        // Into a copy: a value refused leaves `s` as it was.
        S candidate = s;
        f->read(f->from_words(words), candidate, what_);
        const std::string problem = f->problem(candidate);
        check(problem.empty(), ("--" + (f->flag.empty() ? dashed(f->key) : f->flag)).c_str(), problem);
        s = std::move(candidate);
    }

    // One line per field (or per field in `only`): key, type, default (a default-constructed S's
    // value), range, help.
    std::string describe(const std::vector<std::string>* only = nullptr) const {
        // On the heap: GCC 12 warns of a maybe-uninitialized string in a stack copy of some structs.
        const auto defaults = std::make_unique<S>();
        std::ostringstream out;
        for (const auto& f : fields_) {
            if (!selected(*f, only)) continue;
            out << "  " << f->key << " (" << f->type_name() << ", default " << f->text(*defaults);
            const std::string range = f->range_text();
            if (!range.empty()) out << ", " << range;
            out << "): " << f->help << "\n";
        }
        return out.str();
    }

private:
    struct Bounds {
        double low = -std::numeric_limits<double>::infinity();
        double high = std::numeric_limits<double>::infinity();
        bool low_open = false, high_open = false;
    };

    struct Field {
        std::string key, help;
        std::string flag;  // the command line's name, if not the key's
        bool required = false;
        Bounds bounds;
        std::vector<std::string> choices;
        virtual ~Field() = default;
        virtual void read(const Json& value, S& s, const std::string& what) const = 0;
        virtual Json write(const S& s) const = 0;
        virtual std::string text(const S& s) const { return write(s).dump(); }  // for describe()
        virtual void validate(const S&, const std::string&) const {}
        // What is wrong with the field's value in `s` (its range, its choices), or "".
        virtual std::string problem(const S&) const { return ""; }
        virtual const char* type_name() const = 0;
        // How a command line sets the field (none: it cannot), and the JSON of the words it gave.
        virtual std::optional<OptionInfo::Kind> command_line_kind() const { return std::nullopt; }
        virtual Json from_words(const std::vector<std::string>& words) const {
            (void)words;
            throw Error(key + ": not an option of the command line");
        }

        std::string range_text() const {
            if (!choices.empty()) {
                std::string text = "one of";
                for (size_t i = 0; i < choices.size(); ++i) text += (i ? ", " : " ") + choices[i];
                return text;
            }
            const bool low = std::isfinite(bounds.low), high = std::isfinite(bounds.high);
            if (low && high)
                return std::string("in ") + (bounds.low_open ? "(" : "[") + format_number(bounds.low) + ", " +
                       format_number(bounds.high) + (bounds.high_open ? ")" : "]");
            if (low) {
                if (bounds.low == 0 && bounds.low_open) return "positive";
                if (bounds.low == 0) return "0 or more";
                return (bounds.low_open ? "above " : "at least ") + format_number(bounds.low);
            }
            if (high) return (bounds.high_open ? "below " : "at most ") + format_number(bounds.high);
            return "";
        }
        // What is wrong with a number for this field ("must be positive, got -1"), or "".
        std::string number_problem(double x) const {
            if (!std::isfinite(bounds.low) && !std::isfinite(bounds.high)) return "";  // any value, NaN too
            const bool low_ok = bounds.low_open ? x > bounds.low : x >= bounds.low;
            const bool high_ok = bounds.high_open ? x < bounds.high : x <= bounds.high;
            if (!std::isnan(x) && low_ok && high_ok) return "";
            return "must be " + range_text() + ", got " + format_number(x);
        }
        [[noreturn]] void wrong_type(const Json& value, const char* expected, const std::string& what) const {
            throw Error(detail::concat(what, ": \"", key, "\" must be ", expected, ", got ", value.dump()));
        }
    };

    // Whether `v` converts to a T exactly: the right kind of JSON value and, for integers, in range
    // (the JSON library's own conversion wraps or is undefined outside it).
    template <typename T>
    static bool holds(const Json& v) {
        if constexpr (std::is_same_v<T, bool>) {
            return v.is_boolean();
        } else if constexpr (std::is_integral_v<T>) {
            constexpr auto high = static_cast<uint64_t>(std::numeric_limits<T>::max());
            if (v.is_number_unsigned()) return v.get<uint64_t>() <= high;
            if (!v.is_number_integer()) return false;
            const int64_t x = v.get<int64_t>();
            return x >= 0 ? static_cast<uint64_t>(x) <= high
                          : std::is_signed_v<T> && x >= static_cast<int64_t>(std::numeric_limits<T>::min());
        } else if constexpr (std::is_floating_point_v<T>) {
            return v.is_number();
        } else if constexpr (std::is_same_v<T, std::string>) {
            return v.is_string();
        } else if constexpr (requires { typename T::value_type; }) {
            if (!v.is_array()) return false;
            for (const Json& item : v)
                if (!holds<typename T::value_type>(item)) return false;
            return true;
        } else {
            return true;
        }
    }

    template <typename Value>
    struct ValueField : Field {
        std::function<Value&(S&)> access;
        // Reading a const S through a mutable path: write() and validate() never modify it.
        const Value& get(const S& s) const { return access(const_cast<S&>(s)); }

        void read(const Json& value, S& s, const std::string& what) const override {
            if constexpr (std::is_same_v<Value, bool>) {
                if (!value.is_boolean()) this->wrong_type(value, "true or false", what);
            } else if constexpr (std::is_integral_v<Value> && std::is_unsigned_v<Value>) {
                if (!holds<Value>(value)) this->wrong_type(value, "a whole number, 0 or more", what);
            } else if constexpr (std::is_integral_v<Value>) {
                if (!holds<Value>(value)) this->wrong_type(value, "an integer", what);
            } else if constexpr (std::is_floating_point_v<Value>) {
                // NaN (a rate over no words) is written as null, so null reads back as NaN.
                if (value.is_null()) {
                    access(s) = std::numeric_limits<Value>::quiet_NaN();
                    return;
                }
                if (!value.is_number()) this->wrong_type(value, "a number", what);
            } else if constexpr (std::is_same_v<Value, std::string>) {
                if (!value.is_string()) this->wrong_type(value, "a string", what);
            } else if constexpr (requires { typename Value::value_type; }) {
                // The JSON library converts what it is given: a number too large for the element
                // type would be an undefined conversion, not an exception.
                if (!holds<Value>(value)) this->wrong_type(value, type_name(), what);
            }
            try {
                access(s) = value.get<Value>();
            } catch (const Json::exception&) {
                this->wrong_type(value, type_name(), what);
            }
        }
        Json write(const S& s) const override { return Json(get(s)); }
        std::string text(const S& s) const override {
            if constexpr (std::is_floating_point_v<Value>)
                return format_number(static_cast<double>(get(s)), std::is_same_v<Value, float>);
            else return write(s).dump();
        }
        void validate(const S& s, const std::string& what) const override {
            const std::string problem = this->problem(s);
            check(problem.empty(), what.c_str(), "\"", this->key, "\" ", problem);
        }
        std::string problem(const S& s) const override {
            if constexpr (std::is_arithmetic_v<Value> && !std::is_same_v<Value, bool>) {
                return this->number_problem(static_cast<double>(get(s)));
            } else if constexpr (std::is_same_v<Value, std::string>) {
                if (this->choices.empty()) return "";
                const std::string& v = get(s);
                for (const auto& c : this->choices)
                    if (c == v) return "";
                return "is \"" + v + "\"; expected " + this->range_text();
            } else {
                return "";
            }
        }
        const char* type_name() const override {
            if constexpr (std::is_same_v<Value, bool>) return "true or false";
            else if constexpr (std::is_integral_v<Value>) return "integer";
            else if constexpr (std::is_floating_point_v<Value>) return "number";
            else if constexpr (std::is_same_v<Value, std::string>) return "string";
            else return "array";
        }
        std::optional<OptionInfo::Kind> command_line_kind() const override {
            if constexpr (std::is_same_v<Value, bool>) return OptionInfo::Kind::flag;
            else if constexpr (std::is_arithmetic_v<Value> || std::is_same_v<Value, std::string>)
                return OptionInfo::Kind::value;
            else if constexpr (std::is_same_v<Value, std::vector<std::string>>) return OptionInfo::Kind::list;
            else return std::nullopt;
        }
        Json from_words(const std::vector<std::string>& words) const override {
            const std::string flag_text = "--" + (this->flag.empty() ? dashed(this->key) : this->flag);
            if constexpr (std::is_same_v<Value, std::vector<std::string>>) {
                return Json(words);
            } else if constexpr (std::is_same_v<Value, bool>) {
                if (words.empty()) return Json(true);  // the flag alone
                check(words.size() == 1, flag_text.c_str(), "takes at most one word, true or false");
                return word_as_json(words.front(), type_name(), flag_text);
            } else {
                check(words.size() == 1, flag_text.c_str(), "takes one value, got ", words.size());
                return word_as_json(words.front(), type_name(), flag_text);
            }
        }
    };

    template <typename T>
    struct ObjectField : Field {
        explicit ObjectField(const OptionTable<T>& t) : table(t) {}
        const OptionTable<T>& table;
        std::function<T&(S&)> access;
        void read(const Json& value, S& s, const std::string& what) const override {
            if (!value.is_object()) this->wrong_type(value, "an object", what);
            table.read(value, access(s));
        }
        Json write(const S& s) const override { return table.write(access(const_cast<S&>(s))); }
        void validate(const S& s, const std::string&) const override { table.validate(access(const_cast<S&>(s))); }
        const char* type_name() const override { return "object"; }
    };

    template <typename T>
    struct CustomField : Field {
        std::function<Json(const T&)> to_json;
        std::function<void(const Json&, T&)> from_json;
        std::function<T&(S&)> access;
        void read(const Json& value, S& s, const std::string& what) const override {
            if (!value.is_object()) this->wrong_type(value, "an object", what);
            from_json(value, access(s));
        }
        Json write(const S& s) const override { return to_json(access(const_cast<S&>(s))); }
        const char* type_name() const override { return "object"; }
    };

    template <typename T>
    struct ListField : Field {
        explicit ListField(const OptionTable<T>& t) : table(t) {}
        const OptionTable<T>& table;
        std::function<std::vector<T>&(S&)> access;
        void read(const Json& value, S& s, const std::string& what) const override {
            if (!value.is_array()) this->wrong_type(value, "an array", what);
            std::vector<T>& items = access(s);
            items.clear();
            for (const Json& item : value) table.read(item, items.emplace_back());
        }
        Json write(const S& s) const override {
            Json items = Json::array();
            for (const T& item : access(const_cast<S&>(s))) items.push_back(table.write(item));
            return items;
        }
        void validate(const S& s, const std::string&) const override {
            for (const T& item : access(const_cast<S&>(s))) table.validate(item);
        }
        const char* type_name() const override { return "array of objects"; }
    };

    static std::string dashed(std::string key) {
        for (char& c : key) c = c == '_' ? '-' : c;
        return key;
    }
    Field& last() {
        if (fields_.empty()) throw Error(what_ + ": a constraint before any field");
        if (last_borrowed_) throw Error(what_ + ": a constraint on a field of another table");
        return *fields_.back();
    }
    OptionTable& bound_on(double Bounds::*side, double bound, bool open) {
        Bounds& b = last().bounds;
        b.*side = bound;
        (side == &Bounds::low ? b.low_open : b.high_open) = open;
        return *this;
    }
    const Field* find(const std::string& key) const {
        for (const auto& f : fields_)
            if (f->key == key) return f.get();
        return nullptr;
    }
    static bool selected(const Field& f, const std::vector<std::string>* only) {
        if (!only) return true;
        for (const auto& k : *only)
            if (k == f.key) return true;
        return false;
    }

    std::string what_;
    std::vector<std::shared_ptr<Field>> fields_;
    std::vector<std::function<void(const S&)>> rules_;
    std::function<void(S&, const std::set<std::string>&)> finish_;
    bool last_borrowed_ = false;  // the field added last is another table's
};

}  // namespace seqgrad::internal
