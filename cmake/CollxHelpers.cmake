# Small helpers shared by every CMakeLists.txt of collx.

# collx_optional(VAR "description"): an AUTO/ON/OFF cache option for an optional part.
function(collx_optional var description)
  set(${var} AUTO CACHE STRING "${description}: AUTO (when found), ON (required) or OFF")
  set_property(CACHE ${var} PROPERTY STRINGS AUTO ON OFF)
  string(TOUPPER "${${var}}" _value)
  if(NOT _value MATCHES "^(AUTO|ON|OFF)$")
    message(FATAL_ERROR "${var}=${${var}}: expected AUTO, ON or OFF")
  endif()
  set(${var} "${_value}" PARENT_SCOPE)
  set_property(GLOBAL APPEND PROPERTY COLLX_OPTIONAL_PARTS ${var})
  set_property(GLOBAL PROPERTY ${var}_DESCRIPTION "${description}")
endfunction()

# collx_resolve_optional(VAR FOUND_VAR "what was found" "Debian packages to install" ["why"]):
# turns VAR into a boolean COLLX_HAVE_<part> and says clearly what happened ("why", when
# given, says why the part was not found instead of the packages to install).
function(collx_resolve_optional var found_var found_text packages)
  set(_why "${ARGV4}")
  get_property(_description GLOBAL PROPERTY ${var}_DESCRIPTION)
  string(REGEX REPLACE "^COLLX_WITH_" "COLLX_HAVE_" _have "${var}")
  if(${var} STREQUAL "OFF")
    set(_state OFF)
    set(_text "OFF (disabled by ${var}=OFF)")
  elseif(${found_var})
    set(_state ON)
    set(_text "ON (${found_text})")
  elseif(${var} STREQUAL "ON")
    if(_why)
      message(FATAL_ERROR "collx: ${_description} was required by ${var}=ON: ${_why}")
    endif()
    message(FATAL_ERROR "collx: ${_description} was required by ${var}=ON but its dependency "
                        "was not found; install: apt-get install -y ${packages}")
  elseif(_why)
    set(_state OFF)
    set(_text "OFF (${_why})")
  else()
    set(_state OFF)
    set(_text "OFF (not found; install ${packages} to enable it)")
  endif()
  message(STATUS "collx: ${_description}: ${_text}")
  set(${_have} ${_state} PARENT_SCOPE)
  set_property(GLOBAL PROPERTY ${_have}_TEXT "${_text}")
endfunction()

function(collx_print_summary)
  get_property(_parts GLOBAL PROPERTY COLLX_OPTIONAL_PARTS)
  message(STATUS "collx ${PROJECT_VERSION} (${CMAKE_BUILD_TYPE}, shared=${BUILD_SHARED_LIBS}, "
                 "sanitizers='${COLLX_SANITIZE}')")
  foreach(var IN LISTS _parts)
    get_property(_description GLOBAL PROPERTY ${var}_DESCRIPTION)
    string(REGEX REPLACE "^COLLX_WITH_" "COLLX_HAVE_" _have "${var}")
    get_property(_text GLOBAL PROPERTY ${_have}_TEXT)
    message(STATUS "  ${_description}: ${_text}")
  endforeach()
endfunction()

# Per-target warnings (never global flags).
function(collx_target_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANG_AND_ID:CXX,GNU,Clang>:-Wall -Wextra -Wpedantic
      -Wnon-virtual-dtor -Wcast-align -Wformat=2 -Wimplicit-fallthrough>
    # GCC's spelling; Clang has no -Wshadow=local.
    $<$<COMPILE_LANG_AND_ID:CXX,GNU>:-Wshadow=local>
    # GCC 12 reports std::string concatenations at -O3 as overlapping memcpy (GCC bug 105329).
    $<$<CXX_COMPILER_ID:GNU>:-Wno-restrict>)
endfunction()

function(collx_apply_sanitizers list)
  if(list STREQUAL "")
    return()
  endif()
  string(REPLACE "," ";" _names "${list}")
  set(_flags -fno-omit-frame-pointer)
  # A report names file and line: line tables at least, where the build type gives none.
  if(NOT CMAKE_BUILD_TYPE MATCHES "^(Debug|RelWithDebInfo)$")
    list(APPEND _flags -g1)
  endif()
  foreach(name IN LISTS _names)
    if(NOT name MATCHES "^(address|undefined|thread|leak)$")
      message(FATAL_ERROR "COLLX_SANITIZE: unknown sanitizer '${name}'")
    endif()
    list(APPEND _flags -fsanitize=${name})
    if(name STREQUAL "undefined")
      list(APPEND _flags -fno-sanitize-recover=undefined)
    endif()
  endforeach()
  add_compile_options(${_flags})
  add_link_options(${_flags})
  # GCC 12's flow analysis sees the sanitizers' instrumentation as uninitialized reads of
  # default arguments (std::string members of option structs): false positives.
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    add_compile_options(-Wno-maybe-uninitialized)
  endif()
endfunction()

# COLLX_FUZZ: every target with coverage for libFuzzer, ASan and UBSan (the harnesses add
# the fuzzer's main at link time, collx_add_fuzzer).
function(collx_apply_fuzzing)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "COLLX_FUZZ needs Clang (libFuzzer), not ${CMAKE_CXX_COMPILER_ID}: "
                        "-DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 "
                        "(apt-get install clang-14 libfuzzer-14-dev libclang-rt-14-dev)")
  endif()
  if(COLLX_SANITIZE)
    message(FATAL_ERROR "COLLX_FUZZ brings its own sanitizers; leave COLLX_SANITIZE empty")
  endif()
  # -fno-sanitize=function: Clang 14 cannot emit its check's prologue data in coroutines
  # (the shm algorithms'): "Cannot represent a difference across sections", LLVM issue 49689.
  add_compile_options(-fsanitize=fuzzer-no-link,address,undefined
    -fno-sanitize-recover=undefined -fno-sanitize=function -fno-omit-frame-pointer -g)
  add_link_options(-fsanitize=address,undefined)
endfunction()

# collx_add_fuzzer(name SOURCES ... LIBS ... [INCLUDES ...]): the harness fuzz_<name>
# (LLVMFuzzerTestOneInput) with its seed corpus tests/fuzz/corpus/<name>/. With COLLX_FUZZ a
# libFuzzer binary, and the ctest fuzz_<name> (label fuzz) a few seconds' smoke run from the
# seeds; otherwise linked with replay_main.cc, and the ctest (label unit) runs every seed once.
function(collx_add_fuzzer name)
  cmake_parse_arguments(ARG "" "" "SOURCES;LIBS;INCLUDES" ${ARGN})
  set(target fuzz_${name})
  set(seeds "${PROJECT_SOURCE_DIR}/tests/fuzz/corpus/${name}")
  if(NOT IS_DIRECTORY "${seeds}")
    message(FATAL_ERROR "collx_add_fuzzer(${name}): no seed corpus ${seeds}")
  endif()
  add_executable(${target} ${ARG_SOURCES})
  target_link_libraries(${target} PRIVATE ${ARG_LIBS})
  target_include_directories(${target} PRIVATE ${ARG_INCLUDES})
  collx_target_warnings(${target})
  if(COLLX_FUZZ)
    target_link_options(${target} PRIVATE -fsanitize=fuzzer)
    # The first directory is where libFuzzer keeps the inputs it finds new, the second the
    # seeds (read only).
    # A finding's input goes to fuzz-crashes/ (add it to the seeds once fixed: every build
    # then replays it).
    set(found "${PROJECT_BINARY_DIR}/fuzz-corpus/${name}")
    file(MAKE_DIRECTORY "${found}" "${PROJECT_BINARY_DIR}/fuzz-crashes")
    add_test(NAME ${target} COMMAND ${target} -max_total_time=4 -timeout=10 -rss_limit_mb=2048
      -print_final_stats=1 "-artifact_prefix=${PROJECT_BINARY_DIR}/fuzz-crashes/${name}-"
      "${found}" "${seeds}")
    set_tests_properties(${target} PROPERTIES LABELS "fuzz" TIMEOUT 60)
  else()
    target_sources(${target} PRIVATE "${PROJECT_SOURCE_DIR}/tests/fuzz/replay_main.cc")
    add_test(NAME ${target} COMMAND ${target} "${seeds}")
    set_tests_properties(${target} PROPERTIES LABELS "unit" TIMEOUT 120)
    if(COLLX_SANITIZE)
      # A sanitizer build runs the concurrency and process suites only (dev.sh).
      set_target_properties(${target} PROPERTIES EXCLUDE_FROM_ALL ON)
    endif()
  endif()
endfunction()

# collx_add_library(name ALIAS ns::alias [EXPORT set] SOURCES ...): a layer library with the
# house defaults: an ALIAS, warnings, installed into an export set (default collxTargets).
function(collx_add_library name)
  cmake_parse_arguments(ARG "" "ALIAS;EXPORT" "SOURCES" ${ARGN})
  if(NOT ARG_EXPORT)
    set(ARG_EXPORT collxTargets)
  endif()
  add_library(${name} ${ARG_SOURCES})
  add_library(${ARG_ALIAS} ALIAS ${name})
  string(REGEX REPLACE "^collx::" "" _export_name "${ARG_ALIAS}")
  set_target_properties(${name} PROPERTIES EXPORT_NAME ${_export_name})
  # A wheel (pip install ., SKBUILD) stores symlinks as copies: there the libraries, private
  # to the package that ships them, carry no version and are one file each.
  if(NOT SKBUILD)
    set_target_properties(${name} PROPERTIES
      VERSION ${PROJECT_VERSION} SOVERSION ${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR})
  endif()
  target_compile_features(${name} PUBLIC cxx_std_17)
  collx_target_warnings(${name})
  # A shared library's calls to its own functions go straight to them, inlined where they
  # can be, not through the PLT as if another library could replace them (collx supports no
  # such interposition): the hot paths are chains of small calls.
  get_target_property(_type ${name} TYPE)
  if(_type STREQUAL "SHARED_LIBRARY")
    target_compile_options(${name} PRIVATE
      $<$<COMPILE_LANG_AND_ID:CXX,GNU,Clang>:-fno-semantic-interposition>)
    target_link_options(${name} PRIVATE
      $<$<CXX_COMPILER_ID:GNU,Clang>:LINKER:-Bsymbolic-functions>)
  endif()
  # COMPONENT libraries: what a wheel takes (pyproject.toml's install.components).
  install(TARGETS ${name} EXPORT ${ARG_EXPORT}
    LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT libraries
    ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
    RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
    INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
endfunction()
