# Sourced by the tests/cli scripts that compare flag parsing: every long flag also reads DSV4_<FLAG>, so
# the caller's environment must set none. Keeps the test harness's own variables.
for v in $(env | sed -n 's/^\(DSV4_[A-Z0-9_]*\)=.*/\1/p'); do
  case $v in DSV4_SHARED | DSV4_SRC | DSV4_HOME | DSV4_DATA) ;; *) unset "$v" ;; esac
done
