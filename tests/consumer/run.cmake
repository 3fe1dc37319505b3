# Installs the build tree into a scratch prefix, then configures, builds and runs
# tests/consumer (find_package(flashattn) + target_link_libraries) against it.
# Inputs: BUILD_DIR, CONSUMER_DIR, WORK_DIR, EXAMPLE.
function(run_step description)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${description} failed (${rc}):\n${out}\n${err}")
  endif()
  message(STATUS "${description}: ok ${out}")
endfunction()

file(REMOVE_RECURSE ${WORK_DIR})
run_step("install" ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${WORK_DIR}/prefix)
run_step("configure consumer" ${CMAKE_COMMAND} -S ${CONSUMER_DIR} -B ${WORK_DIR}/build
         -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix -DEXAMPLE=${EXAMPLE})
run_step("build consumer" ${CMAKE_COMMAND} --build ${WORK_DIR}/build)
run_step("run consumer (shared library)" ${WORK_DIR}/build/quickstart_shared)
run_step("run consumer (static library)" ${WORK_DIR}/build/quickstart_static)
