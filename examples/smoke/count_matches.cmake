# count_matches(<out_var> <regex> <text>): how many times <regex> matches <text> (0 when never). The smoke
# scripts count with it: the lines of an error message, the cells and curves of a generated SVG.
function(count_matches _out _regex _text)
  string(REGEX MATCHALL "${_regex}" _all "${_text}")
  list(LENGTH _all _n)
  set(${_out} ${_n} PARENT_SCOPE)
endfunction()
