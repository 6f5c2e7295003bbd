/// <reference path="../../../sandbox/tally.d.ts" />
// Started by the large-transfers trigger. A real bank would page compliance; this one logs it.

function run(event) {
  const { transaction_id, amount } = event.data;
  console.log(`large transfer ${transaction_id}: ${amount} USD`);
  return { notified: true, transaction_id, amount };
}
