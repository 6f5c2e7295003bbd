/// <reference path="../../../sandbox/tally.d.ts" />
// transfer's after hook: the output, with a line a person can read. It runs inside transfer's call
// (its savepoint, its authority), recorded as its child; it can read and write nothing itself.

function run(event) {
  const { input, output } = event.data;
  const fee = decimal(input.fee);
  const receipt = `${decimal(input.amount).toFixed(2)} USD sent${fee.gt(0) ? ` (fee ${fee.toFixed(2)})` : ''}; the sender has ${output.from_available} available`;
  return { ...output, receipt };
}
