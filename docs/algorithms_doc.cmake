# docs/algorithms.md's tables come from the registry: `collx-bench -a list --markdown` prints
# them, each block from a line starting with "<!-- generated from the registry" to the line
# "<!-- end of the generated table -->", and this script puts them in the file in place of
# the blocks there (the text around them is written by hand). docs/configuration.md's come
# from the settings registry the same way (TOOL_ARGS=--settings-markdown, TOOL=collx-info).
#
#   cmake -DTOOL=build/bin/collx-bench -DDOC=docs/algorithms.md -P docs/algorithms_doc.cmake
#         rewrites the file (also: cmake --build build --target algorithms-doc)
#   ... -DCHECK=ON                 fails, naming what differs, when the file is not up to date
#                                  (ctest: algorithms_doc)
#   ... -DTOOL_ARGS=...            the tool's arguments (default: -a list --markdown)
#   ... -DDOC_TARGET=...           the target that rewrites the file (for the message)
cmake_minimum_required(VERSION 3.20)
foreach(var TOOL DOC)
  if(NOT ${var})
    message(FATAL_ERROR "algorithms_doc.cmake: set -D${var}=...")
  endif()
endforeach()
if(NOT TOOL_ARGS)
  set(TOOL_ARGS -a list --markdown)
endif()
if(NOT DOC_TARGET)
  set(DOC_TARGET algorithms-doc)
endif()

set(begin_marker "<!-- generated from the registry")
set(end_marker "<!-- end of the generated table -->")

execute_process(COMMAND "${TOOL}" ${TOOL_ARGS} OUTPUT_VARIABLE generated RESULT_VARIABLE code)
if(NOT code EQUAL 0)
  message(FATAL_ERROR "${TOOL} ${TOOL_ARGS} failed (exit ${code})")
endif()
file(READ "${DOC}" text)

# Splits `input` into the blocks between the markers: <out>_BLOCKS (a list of their indices),
# <out>_<i> (block i), <out>_BEFORE_<i> (the text before block i) and <out>_AFTER (the rest).
function(split_blocks input out)
  set(rest "${input}")
  set(i 0)
  set(indices "")
  while(TRUE)
    string(FIND "${rest}" "${begin_marker}" at)
    if(at EQUAL -1)
      break()
    endif()
    string(SUBSTRING "${rest}" 0 ${at} before)
    string(SUBSTRING "${rest}" ${at} -1 rest)
    string(FIND "${rest}" "${end_marker}" stop)
    if(stop EQUAL -1)
      message(FATAL_ERROR "a generated block in ${DOC} has no \"${end_marker}\" line")
    endif()
    string(LENGTH "${end_marker}" length)
    math(EXPR stop "${stop} + ${length}")
    string(SUBSTRING "${rest}" 0 ${stop} block)
    string(SUBSTRING "${rest}" ${stop} -1 rest)
    set(${out}_${i} "${block}" PARENT_SCOPE)
    set(${out}_BEFORE_${i} "${before}" PARENT_SCOPE)
    list(APPEND indices ${i})
    math(EXPR i "${i} + 1")
  endwhile()
  set(${out}_BLOCKS "${indices}" PARENT_SCOPE)
  set(${out}_AFTER "${rest}" PARENT_SCOPE)
endfunction()

split_blocks("${generated}" new)
split_blocks("${text}" old)
list(LENGTH new_BLOCKS count)
list(LENGTH old_BLOCKS have)
if(NOT count EQUAL have)
  message(FATAL_ERROR
    "${DOC} has ${have} generated tables, ${TOOL} prints ${count}: add or remove the "
    "marker lines (\"${begin_marker} ...\" to \"${end_marker}\") by hand")
endif()

set(result "")
set(stale "")
foreach(i IN LISTS new_BLOCKS)
  string(APPEND result "${old_BEFORE_${i}}${new_${i}}")
  if(NOT old_${i} STREQUAL new_${i})
    list(APPEND stale ${i})
  endif()
endforeach()
string(APPEND result "${old_AFTER}")

list(LENGTH stale stale_count)  # (not if(stale): block "0" reads as false)
if(CHECK)
  if(stale_count GREATER 0)
    message(FATAL_ERROR
      "${DOC}: generated table(s) ${stale} (from 0) differ from what ${TOOL} ${TOOL_ARGS} "
      "prints (the registries: each algorithm's entry in "
      "algorithms/src/<collective>/<algorithm>.cc, each setting's declaration); regenerate "
      "them: cmake --build <build> --target ${DOC_TARGET}")
  endif()
  message(STATUS "${DOC}: the generated tables match the registry")
else()
  file(WRITE "${DOC}" "${result}")
  message(STATUS "${DOC}: ${count} tables written from the registry")
endif()
