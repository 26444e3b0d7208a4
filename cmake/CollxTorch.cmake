# The torch the interpreter imports, found through torch's own CMake config
# (find_package(Torch) with torch.utils.cmake_prefix_path as a hint: a pip torch in a venv,
# or Debian's libtorch-dev). Sets, for python/CMakeLists.txt:
#   _collx_torch_found      TRUE when the backend can be built against it
#   _collx_torch_text       which torch, where, and which C++ ABI (the configure line)
#   _collx_torch_why        why not, when it cannot (a configure message, never a build break)
#   COLLX_TORCH_VERSION     e.g. 2.6.0
#   COLLX_TORCH_INCLUDE_DIRS, COLLX_TORCH_LIBRARIES, COLLX_TORCH_DEFINITIONS
#
# The backend is one source for torch 1.13 (c10d::ProcessGroup) and torch 2.x
# (c10d::Backend); older torches, and torches built with the pre-C++11 std::string ABI
# (collx's own libraries, which the backend links, use the C++11 one), are refused here.
set(_collx_torch_found FALSE)
set(_collx_torch_text "")
set(_collx_torch_why "")

execute_process(COMMAND "${Python3_EXECUTABLE}" -c [=[
import os, torch, torch.utils
print(torch.__version__.split('+')[0])
print(int(torch._C._GLIBCXX_USE_CXX11_ABI))
print(torch.utils.cmake_prefix_path)
print(os.path.dirname(torch.__file__))
]=]
  OUTPUT_VARIABLE _torch_out ERROR_VARIABLE _torch_err RESULT_VARIABLE _torch_rc
  OUTPUT_STRIP_TRAILING_WHITESPACE)

if(NOT _torch_rc EQUAL 0)
  string(REGEX MATCH "[^\n]*\n?$" _torch_err "${_torch_err}")
  string(STRIP "${_torch_err}" _torch_err)
  set(_collx_torch_why "${Python3_EXECUTABLE} cannot import torch (${_torch_err}); "
                       "Debian: apt-get install python3-torch libtorch-dev")
else()
  string(REPLACE "\n" ";" _torch_out "${_torch_out}")
  list(GET _torch_out 0 COLLX_TORCH_VERSION)
  list(GET _torch_out 1 _torch_abi)
  list(GET _torch_out 2 _torch_cmake_prefix)
  list(GET _torch_out 3 _torch_package)
  string(REGEX MATCH "^[0-9]+\\.[0-9]+" _torch_py_minor "${COLLX_TORCH_VERSION}")
  # What the interpreter says is checked first: TorchConfig.cmake (a CUDA torch's, say) may
  # fail the configure itself where the backend could never be built anyway.
  if(COLLX_TORCH_VERSION VERSION_LESS 1.13)
    set(_collx_torch_why "torch ${COLLX_TORCH_VERSION} is older than 1.13, the oldest the "
        "backend is written for")
  elseif(NOT _torch_abi EQUAL 1)
    set(_collx_torch_why "torch ${COLLX_TORCH_VERSION} (${_torch_package}) was built with the "
        "pre-C++11 std::string ABI (_GLIBCXX_USE_CXX11_ABI=0) and collx's libraries with the "
        "C++11 one, which the backend must share with both: use a torch built with the C++11 "
        "ABI (a distribution's torch, or pip wheels from torch 2.7 on)")
  else()
    # TorchConfig.cmake appends torch's flags to CMAKE_CXX_FLAGS for the whole project: only
    # the backend's target gets them (COLLX_TORCH_DEFINITIONS).
    set(_collx_saved_cxx_flags "${CMAKE_CXX_FLAGS}")
    find_package(Torch CONFIG QUIET HINTS "${_torch_cmake_prefix}")
    set(CMAKE_CXX_FLAGS "${_collx_saved_cxx_flags}")
    string(REGEX MATCH "^[0-9]+\\.[0-9]+" _torch_cmake_minor "${Torch_VERSION}")
    if(NOT Torch_FOUND)
      set(_collx_torch_why "torch ${COLLX_TORCH_VERSION} imports (${_torch_package}) but its "
          "CMake config (TorchConfig.cmake) was not found, neither under "
          "${_torch_cmake_prefix} nor in the system's; Debian: apt-get install libtorch-dev")
    elseif(NOT _torch_py_minor VERSION_EQUAL _torch_cmake_minor)
      set(_collx_torch_why "${Python3_EXECUTABLE} imports torch ${COLLX_TORCH_VERSION} "
          "(${_torch_package}) but CMake found torch ${Torch_VERSION} (${Torch_DIR}): the "
          "backend must be built against the torch it loads into; set Torch_DIR to the right "
          "one")
    endif()
  endif()
  if(NOT _collx_torch_why)
    find_library(COLLX_TORCH_PYTHON_LIBRARY torch_python NO_CACHE
      HINTS "${TORCH_INSTALL_PREFIX}/lib" "${_torch_package}/lib")
    if(NOT COLLX_TORCH_PYTHON_LIBRARY)
      set(_collx_torch_why "torch ${COLLX_TORCH_VERSION}'s libtorch_python was not found "
          "(under ${TORCH_INSTALL_PREFIX}/lib or ${_torch_package}/lib)")
    else()
      set(_collx_torch_found TRUE)
      set(COLLX_TORCH_INCLUDE_DIRS ${TORCH_INCLUDE_DIRS})
      set(COLLX_TORCH_LIBRARIES ${TORCH_LIBRARIES} ${COLLX_TORCH_PYTHON_LIBRARY})
      separate_arguments(_torch_flags UNIX_COMMAND "${TORCH_CXX_FLAGS}")
      set(COLLX_TORCH_DEFINITIONS)
      foreach(flag IN LISTS _torch_flags)
        if(flag MATCHES "^-D(.+)")
          list(APPEND COLLX_TORCH_DEFINITIONS "${CMAKE_MATCH_1}")
        endif()
      endforeach()
      set(_collx_torch_text "torch ${COLLX_TORCH_VERSION} from ${_torch_package}, "
          "CMake config ${Torch_DIR}, C++11 ABI")
      string(REPLACE ";" "" _collx_torch_text "${_collx_torch_text}")
    endif()
  endif()
endif()
string(REPLACE ";" "" _collx_torch_why "${_collx_torch_why}")
