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

# collx_resolve_optional(VAR FOUND_VAR "what was found" "Debian packages to install"):
# turns VAR into a boolean COLLX_HAVE_<part> and says clearly what happened.
function(collx_resolve_optional var found_var found_text packages)
  get_property(_description GLOBAL PROPERTY ${var}_DESCRIPTION)
  string(REGEX REPLACE "^COLLX_WITH_" "COLLX_HAVE_" _have "${var}")
  if(${var} STREQUAL "OFF")
    set(_state OFF)
    set(_text "OFF (disabled by ${var}=OFF)")
  elseif(${found_var})
    set(_state ON)
    set(_text "ON (${found_text})")
  elseif(${var} STREQUAL "ON")
    message(FATAL_ERROR "collx: ${_description} was required by ${var}=ON but its dependency "
                        "was not found; install: apt-get install -y ${packages}")
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
    $<$<COMPILE_LANG_AND_ID:CXX,GNU,Clang>:-Wall -Wextra -Wpedantic -Wshadow=local
      -Wnon-virtual-dtor -Wcast-align -Wformat=2 -Wimplicit-fallthrough>
    # GCC 12 reports std::string concatenations at -O3 as overlapping memcpy (GCC bug 105329).
    $<$<CXX_COMPILER_ID:GNU>:-Wno-restrict>)
endfunction()

function(collx_apply_sanitizers list)
  if(list STREQUAL "")
    return()
  endif()
  string(REPLACE "," ";" _names "${list}")
  set(_flags -fno-omit-frame-pointer -g)
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
  set_target_properties(${name} PROPERTIES EXPORT_NAME ${_export_name}
    VERSION ${PROJECT_VERSION} SOVERSION ${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR})
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
  install(TARGETS ${name} EXPORT ${ARG_EXPORT}
    LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
    ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
    RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
    INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
endfunction()
