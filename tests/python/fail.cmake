# Fails the test that runs it with the message MSG (cmake -DMSG=... -P fail.cmake).
message(FATAL_ERROR "${MSG}")
