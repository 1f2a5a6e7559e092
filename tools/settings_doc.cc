// cclx_settings_doc: writes docs/SETTINGS.md from the table of settings and hints
// (src/core/settings/table.cc), or with --algorithms docs/ALGORITHMS.md from the algorithm
// catalogue (src/core/select/algorithms.def).
//   cclx_settings_doc [--algorithms]                          # to stdout
//   cclx_settings_doc [--algorithms] docs/SETTINGS.md         # writes the file
//   cclx_settings_doc [--algorithms] --check docs/SETTINGS.md # exit 1 when the file is not
//                                                             # current (a test)
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "core/select/algorithms.h"
#include "core/settings/table.h"

int main(int argc, char** argv) {
  const bool algorithms = argc > 1 && std::strcmp(argv[1], "--algorithms") == 0;
  if (algorithms) --argc, ++argv;
  const std::string md = algorithms ? cclx::algorithmsMarkdown() : cclx::settings::settingsMarkdown();
  const char* source = algorithms ? "src/core/select/algorithms.def" : "src/core/settings/table.cc";
  if (argc == 1) {
    std::fwrite(md.data(), 1, md.size(), stdout);
    return 0;
  }
  if (argc == 3 && std::strcmp(argv[1], "--check") == 0) {
    std::ifstream in(argv[2], std::ios::binary);
    std::stringstream have;
    have << in.rdbuf();
    if (in && have.str() == md) return 0;
    std::fprintf(stderr,
                 "%s is not current with %s; regenerate it from the source root with:\n"
                 "  cmake --build build --target cclx_settings_doc && build/cclx_settings_doc "
                 "%s%s\n",
                 argv[2], source, algorithms ? "--algorithms " : "", argv[2]);
    return 1;
  }
  if (argc == 2 && argv[1][0] != '-') {
    std::ofstream out(argv[1], std::ios::binary | std::ios::trunc);
    out << md;
    return out.good() ? 0 : 1;
  }
  std::fprintf(stderr, "usage: %s [--algorithms] [--check] [docs/SETTINGS.md]\n", argv[0]);
  return 2;
}
