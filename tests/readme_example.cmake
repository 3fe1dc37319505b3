# The README's C++ example must be examples/quickstart.cpp verbatim, so the code a user
# copies is the code the consumer test compiles and runs. Inputs: README, EXAMPLE.
file(READ ${README} readme)
file(READ ${EXAMPLE} example)
string(FIND "${readme}" "```cpp\n${example}```" position)
if(position EQUAL -1)
  message(FATAL_ERROR "README.md does not contain examples/quickstart.cpp verbatim in a cpp block")
endif()
message(STATUS "README example matches examples/quickstart.cpp")
