-- Platform foundation: extensions every later module relies on.
create extension if not exists vector;
