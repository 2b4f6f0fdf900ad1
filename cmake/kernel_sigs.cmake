# kernel_sigs.cmake — each GPU kernel's signature, read once from the kernel prototypes.
#
# Included (by kernel_launchers.cmake): m2_read_kernel_protos(FILES) sets, per kernel found,
#   KNAMES                  the kernel names in file order
#   KFILE_<kernel>          the file (name without directory or extension) it is in
#   KSIG_<kernel>           one letter per parameter: 'M' a pointer (a buffer), 'L' m2_i64,
#                           'I' m2_i32, 'F' float
#   KPAR_<kernel>           the parameter names, a ;-list in prototype order
# Prototypes are `M2K_KERNEL void name(params)` (the portable .cl files) or
# `extern "C" __global__ void __launch_bounds__(..) name(params)` (the CUDA-only .cuh files),
# where params may be one macro `#define X_PARAMS ...` of the same file.
#
# Run as a script (cmake -P): -DOUT=<file.c> -DFILES=a.cl,b.cuh,... -DLIST=list.h
# -DTC_LIST=tc_list.h writes m2g_kernel_sigs, m2g_kernel_params and m2g_kernel_local, indexed
# like the kernel ids of src/gpu/gpu.h (list.h, then tc_list.h; a kernel without a prototype
# is an error). The host layer checks every launch's arguments against m2g_kernel_sigs
# (m2g_launch, src/gpu/gpu_common.c); tests/gpu/test_kernel_sigs.c checks the table, names
# included, against the kernel files with a parser of its own.
# A kernel's work-group shape is the tail of its name: _AxB a group of A x B, _wiN, _wgN,
# _tcN a 1-D group of N (src/gpu/kernels/list.h).

function(m2_read_kernel_protos files)
  set(names "")
  foreach(f ${files})
    get_filename_component(stem "${f}" NAME_WE)
    file(READ "${f}" text)
    # comments out (a parameter list may hold one); line continuations joined
    string(REGEX REPLACE "/\\*([^*]|\\*+[^*/])*\\*+/" " " text "${text}")
    string(REGEX REPLACE "//[^\n]*" " " text "${text}")
    string(REGEX REPLACE "\\\\\n" " " text "${text}")
    # parameter-list macros: #define NAME text (one line now)
    string(REGEX MATCHALL "#define[ \t]+[A-Za-z0-9_]+_PARAMS[ \t][^\n]*" defs "${text}")
    foreach(def ${defs})
      string(REGEX REPLACE "^#define[ \t]+([A-Za-z0-9_]+)[ \t].*" "\\1" mname "${def}")
      string(REGEX REPLACE "^#define[ \t]+[A-Za-z0-9_]+[ \t]+(.*)$" "\\1" mbody "${def}")
      set(MAC_${mname} "${mbody}")
    endforeach()
    string(REGEX MATCHALL
      "(M2K_KERNEL|__global__)[ \t\n]+void[ \t\n]+(__launch_bounds__[ \t\n]*\\([^)]*\\)[ \t\n]+)?[A-Za-z0-9_]+[ \t\n]*\\([^)]*\\)"
      found "${text}")
    foreach(p ${found})
      string(REGEX REPLACE "__launch_bounds__[ \t\n]*\\([^)]*\\)" "" p "${p}")
      string(REGEX REPLACE "^(M2K_KERNEL|__global__)[ \t\n]+void[ \t\n]+([A-Za-z0-9_]+).*" "\\2" name "${p}")
      string(REGEX REPLACE "^[^(]*\\(([^)]*)\\)$" "\\1" params "${p}")
      string(STRIP "${params}" params)
      if(DEFINED MAC_${params})
        set(params "${MAC_${params}}")
      endif()
      string(REPLACE "\n" " " params "${params}")
      string(REPLACE "," ";" params "${params}")
      set(sig "")
      set(pnames "")
      foreach(q ${params})
        string(STRIP "${q}" q)
        string(REGEX REPLACE ".*[ *]([A-Za-z0-9_]+)$" "\\1" pn "${q}")
        if(q MATCHES "\\*")
          string(APPEND sig "M")
        elseif(q MATCHES "^(const[ ]+)?m2_i64[ ]")
          string(APPEND sig "L")
        elseif(q MATCHES "^(const[ ]+)?m2_i32[ ]")
          string(APPEND sig "I")
        elseif(q MATCHES "^(const[ ]+)?float[ ]")
          string(APPEND sig "F")
        else()
          message(FATAL_ERROR "kernel_sigs: ${name}: parameter '${q}' is none of pointer, m2_i64, m2_i32, float")
        endif()
        list(APPEND pnames "${pn}")
      endforeach()
      if(DEFINED KSIG_${name})
        message(FATAL_ERROR "kernel_sigs: ${name} has two prototypes")
      endif()
      set(KSIG_${name} "${sig}" PARENT_SCOPE)
      set(KSIG_${name} "${sig}")
      set(KPAR_${name} "${pnames}" PARENT_SCOPE)
      set(KFILE_${name} "${stem}" PARENT_SCOPE)
      list(APPEND names "${name}")
    endforeach()
  endforeach()
  set(KNAMES "${names}" PARENT_SCOPE)
endfunction()

# the kernels of an X-macro list file (M2G_KERNEL(name) or M2G_TC_KERNEL(name) lines)
function(m2_list_kernels file out)
  file(READ "${file}" t)
  string(REGEX MATCHALL "\nM2G_(TC_)?KERNEL\\([A-Za-z0-9_]+\\)" ks "${t}")
  set(r "")
  foreach(k ${ks})
    string(REGEX REPLACE "\nM2G_(TC_)?KERNEL\\(([A-Za-z0-9_]+)\\)" "\\2" k "${k}")
    list(APPEND r "${k}")
  endforeach()
  set(${out} "${r}" PARENT_SCOPE)
endfunction()

# the work-group size of a kernel from its name: "x, y, z"
function(m2_kernel_local name out)
  if(name MATCHES "_([0-9]+)x([0-9]+)$")
    set(${out} "${CMAKE_MATCH_1}, ${CMAKE_MATCH_2}, 1" PARENT_SCOPE)
  elseif(name MATCHES "_(wi|wg|tc)([0-9]+)$")
    set(${out} "${CMAKE_MATCH_2}, 1, 1" PARENT_SCOPE)
  else()
    message(FATAL_ERROR "kernel_sigs: ${name}: its name does not end in its work-group shape")
  endif()
endfunction()

if(CMAKE_SCRIPT_MODE_FILE STREQUAL CMAKE_CURRENT_LIST_FILE)
  string(REPLACE "," ";" FILES "${FILES}")
  m2_read_kernel_protos("${FILES}")
  m2_list_kernels("${LIST}" portable)
  m2_list_kernels("${TC_LIST}" tc)
  set(sigs "")
  set(pars "")
  set(locs "")
  foreach(k ${portable} ${tc})
    if(NOT DEFINED KSIG_${k})
      message(FATAL_ERROR "kernel_sigs: ${k} (${LIST} or ${TC_LIST}) has no prototype in the kernel files")
    endif()
    string(REPLACE ";" "," p "${KPAR_${k}}")
    m2_kernel_local(${k} l)
    string(APPEND sigs "    \"${KSIG_${k}}\", /* ${k} */\n")
    string(APPEND pars "    \"${p}\",\n")
    string(APPEND locs "    {${l}}, /* ${k} */\n")
  endforeach()
  set(body "/* generated by cmake/kernel_sigs.cmake from the kernel prototypes: do not edit */\n")
  string(APPEND body "#include \"gpu/gpu.h\"\n")
  string(APPEND body "const char *const m2g_kernel_sigs[M2G_NUM_ALL_KERNELS] = {\n${sigs}};\n")
  string(APPEND body "const char *const m2g_kernel_params[M2G_NUM_ALL_KERNELS] = {\n${pars}};\n")
  string(APPEND body "const size_t m2g_kernel_local[M2G_NUM_ALL_KERNELS][3] = {\n${locs}};\n")
  file(WRITE "${OUT}.tmp" "${body}")
  execute_process(COMMAND ${CMAKE_COMMAND} -E copy_if_different "${OUT}.tmp" "${OUT}")
endif()
