/* The simulated libmsprofiler.so and libhcomm.so: programs link them (Huawei's MSPTI samples'
 * CMakeLists.txt), but nothing they call lives there in the simulated tree. */
int msimCannEmptyLibrary;
