# Layering rules of docs/architecture.md, checked on the sources (CMake include paths cannot
# express them all): lib/ never includes oracles/ or solvers/; oracles/ never includes solvers/;
# apps/ and solvers/ never include lib/ or oracles/ (they use the public headers); nothing under
# include/kantor/ includes a CUDA header; lib/core includes no other part of lib/.
set(violations "")
function(check_dir dir pattern)
  file(GLOB_RECURSE files ${SOURCE_DIR}/${dir}/*.hpp ${SOURCE_DIR}/${dir}/*.cpp
       ${SOURCE_DIR}/${dir}/*.cu ${SOURCE_DIR}/${dir}/*.cuh ${SOURCE_DIR}/${dir}/*.h)
  foreach(f ${files})
    file(STRINGS ${f} lines REGEX "^[ \t]*#[ \t]*include[ \t]*[<\"](${pattern})")
    foreach(l ${lines})
      string(APPEND violations "${f}: ${l}\n")
    endforeach()
  endforeach()
  set(violations "${violations}" PARENT_SCOPE)
endfunction()
check_dir(lib "oracles/|solvers/")
# lib/core is the ground floor (errors, types, views, validation, file formats, the certificate
# math): it includes no engine, no runtime and no cost preparation.
check_dir(lib/core "lib/cpu/|lib/cuda/|lib/runtime/|lib/costs/|lib/birkhoff/")
check_dir(oracles "solvers/")
check_dir(solvers "lib/|oracles/")
check_dir(apps "lib/|oracles/|solvers/")
check_dir(include "cuda|cublas|thrust|cub/")
if(violations)
  message(FATAL_ERROR "layering violations:\n${violations}")
endif()
message(STATUS "layering: ok")
