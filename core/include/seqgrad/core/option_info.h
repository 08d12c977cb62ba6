// One option of an option table (a model config's keys, the decoding and training options), as a command line
// offers it: the table that reads and checks the JSON key also makes its flag and its help text.
#pragma once

#include <string>

namespace seqgrad {

struct OptionInfo {
    enum class Kind {
        flag,   // true or false: the flag alone sets it
        value,  // one word: a number or a name
        list,   // one word or more
    };
    std::string key;   // the JSON key: "batch_sentences"
    std::string flag;  // without its dashes: "batch-size" (by default the key, '_' read as '-')
    std::string help;  // the key's meaning, its type, default and range
    Kind kind = Kind::value;
};

}  // namespace seqgrad
