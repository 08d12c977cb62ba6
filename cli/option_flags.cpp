// Flags made from option tables (option_flags.h).
#include "option_flags.h"

namespace seqgrad::cli {

void add_option_flags(CLI::App* cmd, const std::vector<OptionInfo>& options, const std::string& group,
                      GivenOptions& given, const std::set<std::string>& skip) {
    for (const OptionInfo& option : options) {
        if (skip.count(option.key)) continue;
        const std::string key = option.key, name = "--" + option.flag;
        // Its first letter as the help's, as CLI11's own lines read.
        std::string help = option.help;
        if (!help.empty()) help[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(help[0])));
        CLI::Option* flag = nullptr;
        if (option.kind == OptionInfo::Kind::flag) {
            flag = cmd->add_flag_function(
                name, [&given, key](std::int64_t) { given[key] = {}; }, help);
        } else {
            flag = cmd->add_option(
                name,
                [&given, key](const CLI::results_t& words) {
                given[key] = words;
                return true;
                },
                help);
            // A list takes one word or more; a value, one.
            flag->expected(option.kind == OptionInfo::Kind::list ? CLI::detail::expected_max_vector_size : 1);
        }
        flag->group(group);
    }
}

std::string flags_text(const GivenOptions& given, const std::vector<OptionInfo>& options) {
    std::string text;
    for (const OptionInfo& option : options)
        if (given.count(option.key)) text += (text.empty() ? "--" : ", --") + option.flag;
    return text;
}

}  // namespace seqgrad::cli
