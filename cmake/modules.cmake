# One static library per folder of src/ (dsv4_<name>), from every .cpp (and .cu) in it, less EXCLUDE (file
# names of that folder that another library builds).
function(dsv4_module name)
  cmake_parse_arguments(M "" "DIR" "DEPS;EXTERNAL;EXCLUDE" ${ARGN})
  if(NOT M_DIR)
    set(M_DIR ${CMAKE_CURRENT_SOURCE_DIR}/${name})
  endif()
  file(GLOB srcs CONFIGURE_DEPENDS ${M_DIR}/*.cpp)
  foreach(x ${M_EXCLUDE})
    list(REMOVE_ITEM srcs ${M_DIR}/${x})
  endforeach()
  if(NOT srcs)  # a room with headers only so far
    add_library(dsv4_${name} INTERFACE)
    target_include_directories(dsv4_${name} INTERFACE ${PROJECT_SOURCE_DIR}/src)
    target_link_libraries(dsv4_${name} INTERFACE ${M_DEPS} ${M_EXTERNAL})
    return()
  endif()
  add_library(dsv4_${name} STATIC ${srcs})
  target_include_directories(dsv4_${name} PUBLIC ${PROJECT_SOURCE_DIR}/src)
  target_compile_options(dsv4_${name} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${DSV4_WARNINGS}>)
  target_link_libraries(dsv4_${name} PUBLIC ${M_DEPS} ${M_EXTERNAL})
endfunction()

# One gtest executable per folder of tests/unit/ (every *_test.cpp in it), registered with ctest.
function(dsv4_unit_tests name)
  cmake_parse_arguments(T "" "LABELS" "DEPS" ${ARGN})
  file(GLOB srcs CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/unit/${name}/*_test.cpp)
  if(NOT srcs)
    return()
  endif()
  add_executable(test_${name} ${srcs})
  target_compile_options(test_${name} PRIVATE ${DSV4_WARNINGS})
  target_include_directories(test_${name} PRIVATE ${PROJECT_SOURCE_DIR}/tests)
  target_link_libraries(test_${name} PRIVATE ${T_DEPS} dsv4_testing GTest::gtest GTest::gtest_main)
  gtest_discover_tests(test_${name} DISCOVERY_MODE PRE_TEST
    PROPERTIES ENVIRONMENT "DSV4_SHARED=${DSV4_SHARED_DIR};DSV4_BUILD=${PROJECT_BINARY_DIR}"
               LABELS "${T_LABELS}")
endfunction()
