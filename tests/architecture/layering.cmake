# The layout rules of docs/architecture.md, checked on the sources (ctest: Architecture.Layering):
#  1. dependencies flow one way: a component includes only itself and the components before it
#     in ORDER (the order of add_subdirectory in CMakeLists.txt);
#  2. no file is opened below the input boundary: src/allocator, src/analysis, src/hardware, src/html,
#     src/tuner and src/sim use no file stream, no JSON or spec loader, no SQLite, no std::filesystem.
# Run: cmake -DSOURCE_DIR=<repo> -P tests/architecture/layering.cmake
set(ORDER core allocator symbolic spec plan graph hardware profile solver sim analysis job calibration export tuner advisor
          api html executor measure cli)
set(NO_FILES allocator analysis hardware tuner sim html)
set(FILE_IO "ifstream|ofstream|fstream|fopen|read_json_file|load_json_as|sqlite3|Database::open|OpTable::load|"
            "std::filesystem|load_cluster|load_model|load_training|load_plan|load_published_runs")
string(JOIN "" FILE_IO ${FILE_IO})

set(failures "")
file(GLOB dirs LIST_DIRECTORIES true RELATIVE ${SOURCE_DIR}/src ${SOURCE_DIR}/src/*)
foreach(dir ${dirs})
  if(IS_DIRECTORY ${SOURCE_DIR}/src/${dir})
    list(FIND ORDER ${dir} known)
    if(known EQUAL -1)
      string(APPEND failures "src/${dir}: a component missing from ORDER in tests/architecture/layering.cmake\n")
    endif()
  endif()
endforeach()

list(LENGTH ORDER n)
math(EXPR last "${n} - 1")
foreach(i RANGE ${last})
  list(GET ORDER ${i} comp)
  file(GLOB sources ${SOURCE_DIR}/src/${comp}/*.hpp ${SOURCE_DIR}/src/${comp}/*.cpp)
  list(FIND NO_FILES ${comp} no_files)
  foreach(f ${sources})
    file(STRINGS ${f} lines)
    file(RELATIVE_PATH rel ${SOURCE_DIR} ${f})
    foreach(line IN LISTS lines)
      if(line MATCHES "^#include \"([a-z_]+)/")
        list(FIND ORDER ${CMAKE_MATCH_1} j)
        if(j GREATER i)
          string(APPEND failures "${rel}: includes ${CMAKE_MATCH_1}/, which comes after ${comp}\n")
        endif()
      endif()
      if(NOT no_files EQUAL -1 AND line MATCHES "${FILE_IO}" AND NOT line MATCHES "^ *//")
        string(APPEND failures "${rel}: opens or loads a file below the input boundary: ${line}\n")
      endif()
    endforeach()
  endforeach()
endforeach()

if(failures)
  message(FATAL_ERROR "layout rules broken (docs/architecture.md):\n${failures}")
endif()
message(STATUS "layout rules hold: ${n} components, includes flow one way, no file I/O in ${NO_FILES}")
